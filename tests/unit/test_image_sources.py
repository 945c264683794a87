"""The resolution order, registry prefixes, users' alias tables, the substitutes' names, and what
trixie images and npm inherit from the host (pure: no Docker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfarm.errors import ImageError
from envfarm.sandbox.docker.images.aptconfig import parse_deb822_sources
from envfarm.sandbox.docker.images.hostconfig import (
    HostConfig,
    host_npm_settings,
    read_host_config,
)
from envfarm.sandbox.docker.mainprocess import IDLE_COMMAND, main_argv
from envfarm.sandbox.images.aliases import (
    load_alias_table,
    match_alias,
    normalize_reference,
    registry_of,
)
from envfarm.sandbox.images.sources import image_sources, offline


def test_the_default_order_is_local_pull_aliases_and_offline_drops_the_pull() -> None:
    assert image_sources({}) == ["local", "pull", "aliases"]
    assert image_sources({"ENVFARM_OFFLINE": "1"}) == ["local", "aliases"]
    assert image_sources({"ENVFARM_OFFLINE": "0"}) == ["local", "pull", "aliases"]
    assert offline({"ENVFARM_OFFLINE": "true"})
    assert image_sources({"ENVFARM_IMAGE_SOURCES": "aliases, local"}) == ["aliases", "local"]


@pytest.mark.parametrize("text", ["local,registry", "local,local", "pull,,x"])
def test_a_bad_order_is_refused_naming_the_setting(text: str) -> None:
    with pytest.raises(ImageError, match="ENVFARM_IMAGE_SOURCES"):
        image_sources({"ENVFARM_IMAGE_SOURCES": text})


@pytest.mark.parametrize(
    ("reference", "name"),
    [
        ("public.ecr.aws/docker/library/python:3.12-slim-bookworm", "python:3.12-slim-bookworm"),
        ("mirror.gcr.io/library/ubuntu:24.04", "ubuntu:24.04"),
        ("index.docker.io/library/debian:12", "debian:12"),
        ("registry-1.docker.io/library/redis", "redis:latest"),
        ("docker.io/bitnami/redis:7", "bitnami/redis:7"),
        ("ghcr.io/astral-sh/uv:0.8.15", "ghcr.io/astral-sh/uv:0.8.15"),
        ("public.ecr.aws/other/thing:1", "public.ecr.aws/other/thing:1"),
    ],
)
def test_registry_prefixes_of_docker_hub_images_are_dropped(reference: str, name: str) -> None:
    assert normalize_reference(reference)[0] == name


def test_the_registry_of_a_reference() -> None:
    assert registry_of("python:3.12") == "docker.io"
    assert registry_of("bitnami/redis:7") == "docker.io"
    assert registry_of("ghcr.io/astral-sh/uv:latest") == "ghcr.io"
    assert registry_of("127.0.0.1:5000/a/b:1") == "127.0.0.1:5000"
    assert registry_of("localhost/a:1") == "localhost"


@pytest.mark.parametrize(
    ("reference", "recipe", "differs"),
    [
        ("ubuntu:24.04", "ubuntu-noble", "Debian 13"),
        ("public.ecr.aws/docker/library/ubuntu:24.04@sha256:" + "0d" * 32, "ubuntu-noble", "glibc"),
        ("ubuntu:22.04", "ubuntu-jammy", "Debian 12"),
        ("ubuntu:latest", "ubuntu-noble", "Debian 13"),
        ("ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624", "tbench-ubuntu", "tmux"),
        ("ghcr.io/laude-institute/t-bench/python-3-13:20250620", "tbench-python", "3.13"),
        ("python:3.13-slim", "python-slim-trixie", "3.13"),
        ("python:3.13-slim-bookworm", "python-slim-trixie", "Debian 13"),
        ("python:3.12.4-slim", "python-slim-trixie", "3.13 instead"),
        ("python:3.12", "python-trixie", "3.13 instead"),
        ("golang:1.22-bookworm", "golang", "Go 1.24"),
        ("rust:1.83-slim-bookworm", "rust-bookworm", "Rust 1.96"),
        ("rust:1.92-slim", "rust", "Rust 1.85"),
        ("maven:3.9.9-eclipse-temurin-21", "maven21", "OpenJDK 21"),
        ("maven:3.8-openjdk-17", "maven17", "OpenJDK 17"),
        ("eclipse-temurin:21-jdk", "jdk21", "OpenJDK 21"),
        ("eclipse-temurin:11", "jdk17", "17"),
        ("node:22-slim", "node", "Node.js 20"),
        ("node:lts-alpine", "node", "Node.js 20"),
        ("ghcr.io/astral-sh/uv:0.8.15", "uv", "version"),
        ("ghcr.io/astral-sh/uv:latest", "uv", "version"),
    ],
)
def test_the_families_public_tasks_use_have_substitutes_that_say_what_differs(
    reference: str, recipe: str, differs: str
) -> None:
    match = match_alias(reference)
    assert match is not None
    assert match.recipe == recipe
    assert any(reference in w and differs in w for w in match.warnings), match.warnings


def test_substitutes_sit_on_the_suite_their_versions_come_from() -> None:
    table = load_alias_table()
    assert table.suite_of("python-slim-trixie") == "trixie"
    assert table.suite_of("golang") == "trixie"
    assert table.suite_of("jdk17") == "bookworm"
    assert table.root_of("node") == "base-trixie"


def test_a_users_table_adds_recipes_aliases_and_prefixes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "php").mkdir()
    (tmp_path / "php" / "Dockerfile").write_text("ARG BASE\nFROM ${BASE}\n")
    (tmp_path / "mine.toml").write_text(
        'mirror_prefixes = ["registry.example.test/hub/library/"]\n'
        '[recipes.php]\ndockerfile = "php/Dockerfile"\nparent = "base-trixie"\n'
        'description = "PHP"\n'
        '[[aliases]]\nrecipe = "php"\nnames = ["php:8.4-cli"]\n'
        '[[aliases]]\nrecipe = "base"\nnames = ["ubuntu:24.04"]\n'
    )
    monkeypatch.setenv("ENVFARM_ALIASES", str(tmp_path / "mine.toml"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    table = load_alias_table()
    assert table.recipes["php"].dockerfile == str(tmp_path / "php" / "Dockerfile")
    match = match_alias("registry.example.test/hub/library/php:8.4-cli", table)
    assert match is not None
    assert match.recipe == "php"
    ubuntu = match_alias("ubuntu:24.04", table)  # the user's alias is tried first
    assert ubuntu is not None
    assert ubuntu.recipe == "base"
    assert "python-slim" in table.recipes


def test_a_users_table_that_breaks_the_table_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bad.toml").write_text('[[aliases]]\nrecipe = "nope"\nnames = ["x:1"]\n')
    monkeypatch.setenv("ENVFARM_ALIASES", str(tmp_path / "bad.toml"))
    with pytest.raises(ImageError, match=r"bad\.toml"):
        load_alias_table()


SOURCES = """\
Types: deb
URIs: http://apt.example.test/debian
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://apt.example.test/debian-security
Suites: bookworm-security
Components: main
"""


def test_a_trixie_image_uses_the_hosts_archives_with_the_suites_renamed() -> None:
    host = HostConfig(apt_sources=parse_deb822_sources(SOURCES))
    trixie = host.for_suite("trixie")
    assert [s.suites for s in trixie.apt_sources] == [
        ["trixie", "trixie-updates"],
        ["trixie-security"],
    ]
    assert trixie.debian_mirror() == "http://apt.example.test/debian"
    assert (
        b"Suites: trixie trixie-updates"
        in trixie.image_files()["/etc/apt/sources.list.d/debian.sources"]
    )
    assert host.for_suite("bookworm") is host
    assert trixie.digest() != host.digest()


def test_npm_inherits_registries_but_no_credentials_or_host_paths(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "npmrc").write_text(
        "registry=https://npm.example.test/\ncafile=/etc/ssl/certs/ca-certificates.crt\n"
        "//npm.example.test/:_authToken=secret\nprefix=/usr/local\n"
    )
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".npmrc").write_text(
        "; user\n@corp:registry=https://corp.example.test/\nfetch-retries=5\nuserconfig=${HOME}/x\n"
    )
    env = {"NPM_CONFIG_STRICT_SSL": "false", "npm_config__auth": "c2VjcmV0"}
    settings = host_npm_settings(env, tmp_path / "home", tmp_path)
    assert settings == {
        "registry": "https://npm.example.test/",
        "@corp:registry": "https://corp.example.test/",
        "fetch-retries": "5",
        "strict-ssl": "false",
        "cafile": "/etc/ssl/certs/ca-certificates.crt",
    }
    config = read_host_config(root=tmp_path, env=env, home=tmp_path / "home")
    npmrc = config.image_files()["/etc/npmrc"].decode()
    assert "registry=https://npm.example.test/\n" in npmrc
    assert "secret" not in npmrc
    assert "c2VjcmV0" not in npmrc


def test_no_npm_configuration_means_no_npmrc(tmp_path: Path) -> None:
    config = read_host_config(root=tmp_path, env={}, home=tmp_path)
    assert "/etc/npmrc" not in config.image_files()


def test_the_main_process_is_harbors_entrypoint_and_command() -> None:
    assert main_argv({"Entrypoint": None, "Cmd": ["bash"]}, None, None) is None
    assert main_argv({"Entrypoint": ["/e.sh"], "Cmd": ["bash"]}, None, None) == [
        "/e.sh",
        *IDLE_COMMAND,
    ]
    assert main_argv({"Entrypoint": ["/e.sh"]}, None, ["serve", "--port", "1"]) == [
        "/e.sh",
        "serve",
        "--port",
        "1",
    ]
    assert main_argv({"Entrypoint": ["/e.sh"]}, [], ["serve"]) == ["serve"]
    assert main_argv({}, None, list(IDLE_COMMAND)) is None


def test_the_offline_flag_turns_the_pull_off_for_the_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import click
    from click.testing import CliRunner

    from envfarm.cli.options import command_settings, offline_option

    monkeypatch.setenv("ENVFARM_OFFLINE", "")
    monkeypatch.delenv("ENVFARM_IMAGE_SOURCES")

    @click.command()
    @offline_option
    def probe(offline: bool | None) -> None:
        click.echo(",".join(command_settings(offline=offline).sources()))
        assert image_sources() == ["local", "pull", "aliases"]  # os.environ is left alone

    assert CliRunner().invoke(probe, []).output.strip() == "local,pull,aliases"
    assert CliRunner().invoke(probe, ["--offline"]).output.strip() == "local,aliases"
