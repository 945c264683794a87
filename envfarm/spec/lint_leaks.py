"""Lint for what the agent must never find in its image: the tests and the solution.

A Dockerfile ``COPY``/``ADD`` whose source reaches the hidden tests or the solution, and any
build-context file identical to a hidden file. Test logic (``test_*.py``, ``conftest.py``,
``test.sh``...) and the solve script are errors; other identical files are only warnings, as
fixtures, reference copies of the starting code and helpers a solution copies unchanged may be
in the image by design. Files under ``MIN_COMPARED_BYTES`` are not compared: tiny files (an
empty ``__init__.py``) match by chance.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

from envfarm.spec.findings import Finding, error, warning
from envfarm.spec.task import Task

MIN_COMPARED_BYTES = 64
_CODE_SUFFIXES = frozenset(
    {".py", ".sh", ".bash", ".js", ".mjs", ".cjs", ".ts", ".go", ".rs", ".c", ".h", ".cc"}
    | {".cpp", ".hpp", ".java", ".rb", ".pl", ".php", ".lua", ".jl", ".r"}
)
_TEST_NAMES = frozenset({"test.sh", "run-tests.sh", "conftest.py", "pytest.ini"})
_TEST_STEM = re.compile(r"(^tests?[_-].*|.*[_.-](test|tests|spec)$)", re.IGNORECASE)
_SOLVE_NAMES = frozenset({"solve.sh", "solution.sh"})
_HIDDEN_NAMES = ("tests", "solution", "run-tests.sh", "solution.sh", "solution.yaml")
_SKIPPED_DIRS = frozenset({".git", "__pycache__", "node_modules", ".pytest_cache"})


def hidden_paths(task: Task) -> list[Path]:
    """Where the task keeps what the agent must never see: tests and solution, as authored
    (``tests/``, ``solution/``, legacy ``run-tests.sh`` and ``solution.sh``) and as staged."""
    paths = [task.root / name for name in _HIDDEN_NAMES]
    paths += [task.tests_dir] + ([task.solution_dir] if task.solution_dir else [])
    return [path.resolve() for path in paths if path.exists()]


def is_test_code(path: Path) -> bool:
    """Test logic (``test_*.py``, ``*_test.go``, ``x.spec.js``, ``conftest.py``, ``test.sh``...)
    as opposed to a fixture or a reference copy of the starting code, which the agent may have."""
    if path.name in _TEST_NAMES:
        return True
    return path.suffix.lower() in _CODE_SUFFIXES and bool(_TEST_STEM.fullmatch(path.stem))


def _files(root: Path, skip: list[Path]) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    for path in sorted(root.rglob("*")):
        if any(part in _SKIPPED_DIRS for part in path.relative_to(root).parts):
            continue
        if any(path == s or path.is_relative_to(s) for s in skip):
            continue
        if path.is_file() and not path.is_symlink():
            yield path


def _sha256(path: Path) -> str | None:
    try:
        with path.open("rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError:
        return None


def hidden_file_hashes(task: Task) -> dict[str, tuple[Path, bool]]:
    """sha256 -> (a hidden file with that content, whether its presence in the image is a leak)
    for every test and solution file of at least ``MIN_COMPARED_BYTES``. Test logic and the
    solve script leak; fixtures and other solution files may equal starting files by design
    (reference copies, helpers the solution copies unchanged)."""
    hashes: dict[str, tuple[Path, bool]] = {}
    for hidden in hidden_paths(task):
        for path in _files(hidden, []):
            if path.stat().st_size < MIN_COMPARED_BYTES:
                continue
            digest = _sha256(path)
            if digest is None:
                continue
            serious = path.name in _SOLVE_NAMES or is_test_code(path)
            if digest not in hashes or (serious and not hashes[digest][1]):
                hashes[digest] = (path, serious)
    return hashes


def lint_build_context(task: Task) -> list[Finding]:
    """Files of the build context identical to a test or solution file."""
    context = task.environment_dir
    if task.dockerfile is None or not context.is_dir():
        return []
    hidden = hidden_file_hashes(task)
    found: list[Finding] = []
    for path in _files(context.resolve(), hidden_paths(task)):
        if path.stat().st_size < MIN_COMPARED_BYTES:
            continue
        match = hidden.get(_sha256(path) or "")
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
