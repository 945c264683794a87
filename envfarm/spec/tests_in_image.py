"""The lint rule ``tests-in-image``: the image build would carry the tests or the solution.

A Dockerfile ``COPY``/``ADD`` whose source reaches the hidden tests or the solution, and any
build-context file identical to a hidden file (``spec.hidden_files``). Test logic and the solve
script are errors; other identical files are only warnings, as fixtures, reference copies of the
starting code and helpers a solution copies unchanged may be in the image by design.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

from envfarm.spec.findings import Finding, error, warning
from envfarm.spec.hidden_files import (
    MIN_COMPARED_BYTES,
    hidden_file_hashes,
    hidden_paths,
    sha256_of,
    task_files,
)
from envfarm.spec.loaded_task import Task


def lint_build_context(task: Task) -> list[Finding]:
    """Files of the build context identical to a test or solution file."""
    context = task.environment_dir
    if task.dockerfile is None or not context.is_dir():
        return []
    hidden = hidden_file_hashes(task)
    found: list[Finding] = []
    for path in task_files(context.resolve(), hidden_paths(task)):
        if path.stat().st_size < MIN_COMPARED_BYTES:
            continue
        match = hidden.get(sha256_of(path) or "")
        if match is None:
            continue
        source, serious = match
        shown = _relative(path, task.root)
        original = _relative(source, task.root)
        if serious:
            found.append(
                error(
                    "tests-in-image",
                    f"{shown} is identical to {original}: the build context holds a copy of "
                    "the hidden test logic or solve script, which the image can carry to the "
                    "agent",
                )
            )
        else:
            found.append(
                warning(
                    "tests-in-image",
                    f"{shown} is identical to {original}: fine for a fixture or a copy of the "
                    "starting code, a leak if it holds expected results or the answer",
                )
            )
    return found


def _relative(path: Path, root: Path) -> str:
    resolved = path.resolve()
    return str(resolved.relative_to(root)) if resolved.is_relative_to(root) else str(path)


def lint_dockerfile_copies(task: Task) -> list[Finding]:
    """``COPY``/``ADD`` sources that reach the hidden tests or the solution."""
    if task.dockerfile is None:
        return []
    try:
        text = task.dockerfile.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    context = task.environment_dir.resolve()
    hidden = hidden_paths(task)
    found: list[Finding] = []
    for line, sources in dockerfile_copy_sources(text):
        for source in sources:
            reached = _reached_hidden(context, source, hidden)
            if reached is not None:
                found.append(
                    error(
                        "tests-in-image",
                        f"{_relative(task.dockerfile, task.root)} line {line} copies "
                        f"{source!r}, which includes {_relative(reached, task.root)}: the "
                        "tests and the solution must stay out of the image",
                    )
                )
    return found


def _reached_hidden(context: Path, source: str, hidden: list[Path]) -> Path | None:
    pattern = source.lstrip("/") or "."
    if pattern in (".", "./"):
        matches = [context]
    else:
        matches = (
            [p.resolve() for p in context.glob(pattern)] if "*" in pattern or "?" in pattern else []
        )
        if not matches:
            matches = [(context / pattern).resolve()]
    for match in matches:
        for path in hidden:
            if path == match or path.is_relative_to(match):
                return path
    return None


def dockerfile_copy_sources(text: str) -> list[tuple[int, list[str]]]:
    """(line number, sources) of every ``COPY``/``ADD`` from the build context."""
    result: list[tuple[int, list[str]]] = []
    for line, instruction in _instructions(text):
        keyword, _, rest = instruction.partition(" ")
        if keyword.upper() not in ("COPY", "ADD") or "<<" in rest:
            continue
        rest = rest.strip()
        if rest.startswith("["):
            words = re.findall(r'"((?:[^"\\]|\\.)*)"', rest)
        else:
            try:
                words = shlex.split(rest)
            except ValueError:
                words = rest.split()
        flags = [w for w in words if w.startswith("--")]
        if any(f.startswith("--from") for f in flags):
            continue
        paths = [w for w in words if not w.startswith("--")]
        if len(paths) >= 2:
            result.append((line, paths[:-1]))
    return result


def _instructions(text: str) -> Iterator[tuple[int, str]]:
    """Dockerfile instructions with continuation lines joined, comments dropped."""
    buffer: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not buffer and (not stripped or stripped.startswith("#")):
            continue
        if buffer and stripped.startswith("#"):
            continue
        if not buffer:
            start = number
        if stripped.endswith("\\"):
            buffer.append(stripped[:-1])
            continue
        buffer.append(stripped)
        yield start, " ".join(buffer).strip()
        buffer = []
    if buffer:
        yield start, " ".join(buffer).strip()
