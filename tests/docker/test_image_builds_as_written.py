"""Task images built as the task wrote them: its own build context, BuildKit's heredocs on the
classic builder, errors that quote the task's lines and say whose fault they are."""

from __future__ import annotations

import hashlib
import re
import shutil
import uuid
from pathlib import Path

import pytest

from envfarm.errors import TaskBuildError
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.images.task_images import BuiltImage, build_task_image

pytestmark = pytest.mark.docker

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tasks"
RUN_ID = uuid.uuid4().hex[:12]


async def _build(
    root: Path, name: str, created: list[str], logs: list[str] | None = None
) -> BuiltImage:
    tag_hint = f"{name}-{uuid.uuid4().hex[:12]}"
    created.append(f"envfarm-task/{tag_hint}:{RUN_ID}")
    return await build_task_image(
        root,
        root / "environment" / "Dockerfile",
        root / "environment",
        tag_hint,
        RUN_ID,
        timeout=600.0,
        on_log=None if logs is None else logs.append,
    )


def _run(image: str, *command: str) -> str:
    return str(docker_client().containers.run(image, list(command), remove=True).decode())


def _sums(context: Path, names: list[str]) -> str:
    lines = [f"{hashlib.sha256((context / n).read_bytes()).hexdigest()}  ./{n}" for n in names]
    return "\n".join(lines) + "\n"


def _task(tmp_path: Path, dockerfile: str, files: dict[str, str]) -> Path:
    root = tmp_path / uuid.uuid4().hex[:8]
    (root / "environment").mkdir(parents=True)
    (root / "environment" / "Dockerfile").write_text(dockerfile)
    for name, text in files.items():
        (root / "environment" / name).write_text(text)
    return root


async def test_the_image_holds_the_build_context_byte_for_byte(
    tmp_path: Path, created_tags: list[str]
) -> None:
    root = tmp_path / "context-checksums"
    shutil.copytree(FIXTURES / "context-checksums", root)
    built = await _build(root, "context", created_tags)
    assert built.warnings == []
    sent = [".dockerignore", "Dockerfile", "app/main.py", "data.txt", "keep.log"]
    assert _run(built.tag, "cat", "/ctx.sums") == _sums(root / "environment", sent)


@pytest.mark.parametrize(
    ("ignore", "sent"),
    [
        (None, ["Dockerfile", "a.txt"]),
        (".dockerignore\nDockerfile\n", ["a.txt"]),
        ("# only a comment\n", ["Dockerfile", "a.txt"]),
    ],
)
async def test_a_context_gains_no_dockerignore_line(
    tmp_path: Path, created_tags: list[str], ignore: str | None, sent: list[str]
) -> None:
    dockerfile = (
        "FROM debian:bookworm-slim\nWORKDIR /ctx\nCOPY . .\n"
        "RUN find . -type f | sort | xargs sha256sum > /ctx.sums\n"
    )
    files = {"a.txt": "a\n"} | ({} if ignore is None else {".dockerignore": ignore})
    root = _task(tmp_path, dockerfile, files)
    built = await _build(root, "ignore", created_tags)
    sums = _run(built.tag, "cat", "/ctx.sums").splitlines(keepends=True)
    if ignore == "# only a comment\n":  # nothing it excludes: the one case given a line
        assert "ends with a line naming it" in built.warnings[0]
        sums = [line for line in sums if not line.endswith("./.dockerignore\n")]
    else:
        assert built.warnings == []
    assert "".join(sums) == _sums(root / "environment", sent)


async def test_run_heredocs_build_as_buildkit_builds_them(
    tmp_path: Path, created_tags: list[str]
) -> None:
    root = tmp_path / "run-heredoc"
    shutil.copytree(FIXTURES / "run-heredoc", root)
    built = await _build(root, "heredoc", created_tags)
    shown = _run(built.tag, "cat", "/from-shell", "/from-python", "/from-script", "/expanded")
    assert shown == "shell heredoc\npython 3\nscript\nhello world\n"
    assert "No such file" in _run(built.tag, "sh", "-c", "ls /.envfarm-heredoc* 2>&1; true")


async def test_a_copy_of_several_sources_to_dot_builds_as_buildkit_builds_it(
    tmp_path: Path, created_tags: list[str]
) -> None:
    root = tmp_path / "copy-to-dot"
    shutil.copytree(FIXTURES / "copy-to-dot", root)
    built = await _build(root, "copy-to-dot", created_tags)
    shown = _run(built.tag, "sh", "-c", "cd /app && ls server.py persona.md one.cfg sub/notes.txt")
    assert shown.split() == ["one.cfg", "persona.md", "server.py", "sub/notes.txt"]


async def test_a_missing_copy_source_is_the_tasks_fault_and_built_once(
    tmp_path: Path, created_tags: list[str]
) -> None:
    root = tmp_path / "missing-copy-source"
    shutil.copytree(FIXTURES / "missing-copy-source", root)
    logs: list[str] = []
    with pytest.raises(TaskBuildError) as info:
        await _build(root, "missing", created_tags, logs)
    first, second = str(info.value).splitlines()[:2]
    assert "line 3: COPY requirements.txt /app/" in first
    assert "requirements.txt" in first
    assert second.startswith("substitutions: python:3.12-slim by envfarm's recipe ")
    assert not info.value.infrastructure
    assert (
        sum(bool(re.match(r"Step 1/\d+ : line 1: FROM python:3.12-slim", ln)) for ln in logs) == 1
    )


async def test_a_run_failing_the_same_way_twice_is_the_tasks_fault(
    tmp_path: Path, created_tags: list[str]
) -> None:
    dockerfile = (
        "FROM debian:bookworm-slim\n"
        "RUN --mount=type=cache,target=/root/.cache \\\n"
        "    echo about to fail; exit 7\n"
    )
    logs: list[str] = []
    with pytest.raises(TaskBuildError) as info:
        await _build(_task(tmp_path, dockerfile, {}), "fails", created_tags, logs)
    message = str(info.value)
    own_line = "line 2: RUN --mount=type=cache,target=/root/.cache \\ ..."
    assert f"{own_line}: returned a non-zero code: 7" in message
    assert "substitutions: debian:bookworm-slim by envfarm's recipe base" in message
    assert "base64" not in message
    assert "eval" not in message
    assert sum(bool(re.match(r"Step 2/\d+ : line 2: RUN --mount", line)) for line in logs) == 2
