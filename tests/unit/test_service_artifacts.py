"""Harbor's ``artifacts`` with ``service``: accepted when the service exists, refused with the
services named when it does not; the engine's archive of a path becomes a copy as the main
container's artifacts are (the engine's side is in tests/docker/test_service_artifacts.py)."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import pytest

from envfarm.errors import TaskSpecError
from envfarm.grading.verifier.service_artifacts import _as_copied, _excluded
from envfarm.spec import load_task

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "service-artifacts"


def with_artifacts(tmp_path: Path, artifacts: str, compose: bool = True) -> Path:
    root = tmp_path / "task"
    shutil.copytree(FIXTURE, root)
    toml = (root / "task.toml").read_text()
    start, end = toml.index("artifacts = ["), toml.index("]\n\n[task]") + 2
    (root / "task.toml").write_text(toml[:start] + artifacts + toml[end:])
    if not compose:
        (root / "environment" / "docker-compose.yaml").unlink()
    return root


def test_a_sidecars_artifact_is_read_and_main_is_the_main_container(tmp_path: Path) -> None:
    task = load_task(FIXTURE)
    assert [a.sidecar for a in task.config.artifacts] == ["recorder"] * 3 + [None]
    main = load_task(with_artifacts(tmp_path, 'artifacts = [{source = "/a", service = "main"}]'))
    assert main.config.artifacts[0].sidecar is None


def test_an_unknown_service_is_refused_naming_the_services(tmp_path: Path) -> None:
    root = with_artifacts(tmp_path, 'artifacts = [{source = "/a", service = "db"}]')
    with pytest.raises(TaskSpecError) as caught:
        load_task(root)
    assert "artifacts[0].service: 'db' is not a service of environment/docker-compose.yaml" in (
        str(caught.value)
    )
    assert "its services: main, recorder" in str(caught.value)
    alone = with_artifacts(
        tmp_path / "alone", 'artifacts = [{source = "/a", service = "db"}]', compose=False
    )
    with pytest.raises(TaskSpecError, match=r"the task has no environment/docker-compose\.yaml"):
        load_task(alone)


def engine_archive(entries: dict[str, bytes | None]) -> bytes:
    """As the engine archives a path: its last name as the top entry (None: a directory)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            else:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_a_directory_becomes_its_contents_without_the_excluded() -> None:
    archive = engine_archive(
        {
            "log": None,
            "log/a.ndjson": b"a",
            "log/cache": None,
            "log/cache/x.ndjson": b"x",
            "log/b.tmp": b"b",
            "log/day1": None,
            "log/day1/c.tmp": b"c",
        }
    )
    is_dir, copied = _as_copied(archive, ["*.tmp", "cache"])
    assert is_dir
    with tarfile.open(fileobj=io.BytesIO(copied)) as kept:
        names = kept.getnames()
        member = kept.extractfile("a.ndjson")
        assert member is not None
        assert member.read() == b"a"
    assert names == ["a.ndjson", "day1"]
    file_archive = engine_archive({"requests.ndjson": b"{}"})
    assert _as_copied(file_archive, ["*.ndjson"]) == (False, file_archive)


def test_excludes_match_as_tars_unanchored_patterns() -> None:
    assert _excluded("day1/c.tmp", ["*.tmp"])
    assert _excluded("cache/x", ["cache"])
    assert _excluded("a/b/c", ["b/c"])
    assert not _excluded("a.ndjson", ["*.tmp", "cache"])


def test_an_unreadable_compose_file_is_the_only_error(tmp_path: Path) -> None:
    root = with_artifacts(tmp_path, 'artifacts = [{source = "/a", service = "recorder"}]')
    (root / "environment" / "docker-compose.yaml").write_text("services: [main\n")
    with pytest.raises(TaskSpecError) as caught:
        load_task(root)
    assert "docker-compose.yaml" in str(caught.value)
    assert "artifacts[0].service" not in str(caught.value)
