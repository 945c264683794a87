"""The alias table and Dockerfile FROM rewriting (pure: no Docker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfarm.errors import ImageError, UnknownBaseImage
from envfarm.sandbox.images.aliases import (
    AliasMatch,
    alias_table_markdown,
    images_dir,
    load_alias_table,
    match_alias,
    normalize_reference,
    recipe_args,
    unknown_base,
)
from envfarm.sandbox.images.task_image import dockerfile_bases, rewrite_dockerfile, task_image_tag


@pytest.mark.parametrize(
    ("reference", "recipe"),
    [
        ("debian:bookworm", "base"),
        ("debian:bookworm-slim", "base"),
        ("debian:12", "base"),
        ("debian:12-slim", "base"),
        ("debian:stable-slim", "base"),
        ("python:3.11", "python"),
        ("python:3.11-bookworm", "python"),
        ("python:3.11-slim", "python-slim"),
        ("python:3.11-slim-bookworm", "python-slim"),
        ("python:3-slim", "python-slim"),
        ("python:3.12-slim", "python-slim-trixie"),
        ("python:3.12", "python-trixie"),
        ("buildpack-deps:bookworm", "buildpack-deps"),
        ("docker.io/library/python:3.11-slim", "python-slim"),
        ("library/debian:12", "base"),
        ("python:3.11.9-slim", "python-slim"),
        ("python:3.11.9", "python"),
        ("debian:12.5-slim", "base"),
        ("debian:bookworm-20240110-slim", "base"),
    ],
)
def test_common_public_names_map_to_local_recipes(reference: str, recipe: str) -> None:
    match = match_alias(reference)
    assert match is not None
    assert match.recipe == recipe


@pytest.mark.parametrize(
    "reference",
    ["ubuntu:18.04", "ghcr.io/foo/bar", "alpine", "python:3.11-alpine", "python:3.11.4-alpine"],
)
def test_bases_without_an_alias_do_not_match(reference: str) -> None:
    assert match_alias(reference) is None


def test_exact_bookworm_names_carry_no_warning() -> None:
    for name in ("debian:bookworm-slim", "python:3.11-slim", "python:3.11"):
        match = match_alias(name)
        assert match is not None
        assert match.warnings == []


def test_python_312_warns_that_the_version_cannot_be_supplied() -> None:
    match = match_alias("python:3.12-slim")
    assert match is not None
    assert len(match.warnings) == 1
    assert "python:3.12-slim" in match.warnings[0]
    assert "3.13" in match.warnings[0]


def test_moving_tags_warn() -> None:
    match = match_alias("debian:stable-slim")
    assert match is not None
    assert any("bookworm" in warning for warning in match.warnings)


def test_digest_is_stripped_with_a_warning() -> None:
    reference = "python:3.11-slim@sha256:" + "ab" * 32
    name, warnings = normalize_reference(reference)
    assert name == "python:3.11-slim"
    assert len(warnings) == 1
    assert "digest" in warnings[0]
    match = match_alias(reference)
    assert match is not None
    assert match.recipe == "python-slim"
    assert match.warnings == warnings


def test_normalisation_adds_latest_and_drops_hub_prefixes() -> None:
    assert normalize_reference("debian")[0] == "debian:latest"
    assert normalize_reference("docker.io/library/debian:12")[0] == "debian:12"
    assert normalize_reference("localhost:5000/tool")[0] == "localhost:5000/tool:latest"


def test_unknown_base_names_base_dockerfile_and_how_to_add_an_alias() -> None:
    error = unknown_base("ubuntu:22.04", "/tasks/t/environment/Dockerfile")
    assert isinstance(error, UnknownBaseImage)
    assert "ubuntu:22.04" in str(error)
    assert "/tasks/t/environment/Dockerfile" in str(error)
    assert "docs/images.md" in str(error)
    assert "aliases.toml" in str(error)


def test_every_recipe_has_its_dockerfile_in_the_package() -> None:
    table = load_alias_table()
    for recipe in table.recipes.values():
        if recipe.suite is not None:
            assert (images_dir() / "base" / "Dockerfile").is_file()
            assert (images_dir() / "base" / "rootfs.toml").is_file()
        else:
            assert recipe.dockerfile is not None
            assert (images_dir() / recipe.dockerfile).is_file()


def test_an_invalid_alias_table_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "aliases.toml"
    path.write_text(
        '[recipes.base]\ndescription = "x"\nsuite = "bookworm"\n\n'
        '[[aliases]]\nrecipe = "nope"\nnames = ["a:1"]\n'
    )
    with pytest.raises(ImageError, match=r"aliases\.toml") as info:
        load_alias_table(path)
    assert "unknown recipe" in str(info.value)


def test_an_alias_name_must_be_written_normalised(tmp_path: Path) -> None:
    path = tmp_path / "aliases.toml"
    path.write_text(
        'mirror_prefixes = ["docker.io/library/"]\n'
        '[recipes.base]\ndescription = "x"\nsuite = "bookworm"\n\n[[aliases]]\nrecipe = "base"\n'
    )
    path.write_text(path.read_text() + 'names = ["docker.io/library/debian"]\n')
    with pytest.raises(ImageError, match="not normalised"):
        load_alias_table(path)


MULTI_STAGE = """\
# syntax=docker/dockerfile:1
ARG PY=3.11
ARG DEBIAN=bookworm-slim
FROM --platform=linux/amd64 python:${PY}-slim AS build
RUN pip wheel -w /w six
from debian:$DEBIAN as runtime
COPY --from=build /w /w
COPY --from=python:3.11-slim /usr/bin/python3 /opt/python3
FROM build
RUN echo hi \\
    && echo there
FROM scratch
"""


def test_bases_resolve_args_and_skip_stages_and_scratch() -> None:
    assert dockerfile_bases(MULTI_STAGE, "Dockerfile") == [
        "python:3.11-slim",
        "debian:bookworm-slim",
    ]


def test_rewrite_points_external_bases_at_local_images() -> None:
    images = {"python:3.11-slim": "envfarm/python-slim:aaa", "debian:bookworm-slim": "envfarm/b:c"}
    out = rewrite_dockerfile(MULTI_STAGE, images, "Dockerfile").splitlines()
    assert out[3] == "FROM envfarm/python-slim:aaa AS build"
    assert out[5] == "FROM envfarm/b:c AS runtime"
    assert out[6] == "COPY --from=build /w /w"
    assert out[7] == "COPY --from=envfarm/python-slim:aaa /usr/bin/python3 /opt/python3"
    assert out[8] == "FROM build"
    assert out[9:11] == ["RUN echo hi \\", "    && echo there"]
    assert out[11] == "FROM scratch"
    assert out[0] == "# syntax=docker/dockerfile:1"


def test_rewrite_joins_a_continued_from_into_one_line() -> None:
    text = "FROM \\\n  python:3.11-slim \\\n  AS base\nRUN true\n"
    out = rewrite_dockerfile(text, {"python:3.11-slim": "local:1"}, "Dockerfile")
    assert out == "FROM local:1 AS base\nRUN true\n"


def test_arg_with_inline_default_expression() -> None:
    text = "FROM python:${VERSION:-3.11}-slim\n"
    assert dockerfile_bases(text, "Dockerfile") == ["python:3.11-slim"]


def test_arg_without_a_default_is_a_clear_error() -> None:
    text = "ARG BASE\nFROM $BASE\n"
    with pytest.raises(UnknownBaseImage, match=r"tasks/x/Dockerfile.*\$BASE"):
        dockerfile_bases(text, "tasks/x/Dockerfile")


def test_from_without_an_image_is_an_error() -> None:
    with pytest.raises(ImageError, match="line 2"):
        dockerfile_bases("# comment\nFROM\n", "Dockerfile")


def test_task_image_tag_is_a_valid_docker_reference() -> None:
    assert task_image_tag("My Task/1", "0123456789abcdef0123") == (
        "envfarm-task/my-task-1:0123456789abcdef"
    )
    assert task_image_tag("___", "ab") == "envfarm-task/task:ab"
    with pytest.raises(ImageError, match="content hash"):
        task_image_tag("t", "///")


def test_docs_show_the_current_alias_table() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "images.md"
    assert alias_table_markdown() in docs.read_text()


@pytest.mark.parametrize(
    ("reference", "recipe", "warns"),
    [
        ("postgres:15", "postgres", False),
        ("postgres:15-bookworm", "postgres", False),
        ("postgres:15.6", "postgres", True),
        ("postgres:15-alpine", "postgres", True),
        ("postgres:16", "postgres", True),
        ("postgres:16.2-alpine3.19", "postgres", True),
        ("postgres", "postgres", True),
        ("docker.io/library/postgres:15", "postgres", False),
        ("redis:7.0", "redis", False),
        ("redis:7", "redis", True),
        ("redis:7-alpine", "redis", True),
        ("redis:7.2.4", "redis", True),
        ("redis", "redis", True),
    ],
)
def test_service_images_map_to_the_debian_recipes(reference: str, recipe: str, warns: bool) -> None:
    match = match_alias(reference)
    assert match is not None
    assert match.recipe == recipe
    assert bool(match.warnings) == warns
    if warns:
        assert reference in match.warnings[0]
        assert ("PostgreSQL 15" if recipe == "postgres" else "Redis 7.0") in match.warnings[0]


@pytest.mark.parametrize(
    ("reference", "recipe"),
    [
        ("rust:1.85-slim", "rust-bookworm"),
        ("rust:1.88", "rust-bookworm"),
        ("rust:1.90-slim-bookworm", "rust-bookworm"),
        ("rust:bookworm", "rust-bookworm"),
        ("rust:1.89-slim", "rust"),
        ("rust:1", "rust"),
        ("rust:latest", "rust"),
        ("rust:1.85-trixie", "rust"),
        ("ubuntu:24.04", "ubuntu-noble"),
        ("ubuntu:22.04", "ubuntu-jammy"),
    ],
)
def test_substitutes_keep_the_debian_release_the_tag_names(reference: str, recipe: str) -> None:
    match = match_alias(reference)
    assert match is not None
    assert match.recipe == recipe


def test_an_alias_that_requires_a_setting_applies_only_where_it_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ENVFARM_UBUNTU_ARCHIVE", raising=False)
    assert (match_alias("python:3.12-slim") or _none()).recipe == "python-slim-trixie"
    monkeypatch.setenv("ENVFARM_UBUNTU_ARCHIVE", "http://archive.invalid/ubuntu")
    found = match_alias("python:3.12.4-slim-bookworm") or _none()
    assert found.recipe == "python312-slim"
    assert "CPython 3.12" in found.warnings[0]
    recipe = load_alias_table().recipes["python312-slim"]
    assert recipe_args(recipe)["UBUNTU_ARCHIVE"] == "http://archive.invalid/ubuntu"
    assert (match_alias("python:3.14-slim") or _none()).recipe == "python-slim-trixie"


def _none() -> AliasMatch:
    raise AssertionError("no alias matched")
