"""What a task hides from its agent (the tests and the solution) and which copies would leak.

The hidden files are where the task keeps them as authored (``tests/``, ``solution/``, a legacy
task's ``run-tests.sh`` and ``solution.sh``) and as staged. Test logic (``test_*.py``,
``conftest.py``, ``test.sh``...) and the solve script are leaks wherever the agent could find a
copy; other hidden files (fixtures, reference copies of the starting code, helpers a solution
copies unchanged) may be in the image by design. Files under ``MIN_COMPARED_BYTES`` are not
compared: tiny files (an empty ``__init__.py``) match by chance. Both looks for leaks use this:
the static one of ``envfarm check`` (``spec.tests_in_image``) and the one inside a built image
(``envfarm/check/leaks.py``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

from envfarm.spec.loaded_task import Task

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
    for step in task.steps:
        paths += [*step.tests_dirs] + ([step.solution_dir] if step.solution_dir else [])
    return [path.resolve() for path in paths if path.exists()]


def is_test_code(path: Path) -> bool:
    """Test logic (``test_*.py``, ``*_test.go``, ``x.spec.js``, ``conftest.py``, ``test.sh``...)
    as opposed to a fixture or a reference copy of the starting code, which the agent may have."""
    if path.name in _TEST_NAMES:
        return True
    return path.suffix.lower() in _CODE_SUFFIXES and bool(_TEST_STEM.fullmatch(path.stem))


def task_files(root: Path, skip: list[Path]) -> Iterator[Path]:
    """The regular files at or below ``root`` (not below ``skip``), caches and VCS left out."""
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


def sha256_of(path: Path) -> str | None:
    """The sha256 hex of a file's bytes; None when it cannot be read."""
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
        for path in task_files(hidden, []):
            if path.stat().st_size < MIN_COMPARED_BYTES:
                continue
            digest = sha256_of(path)
            if digest is None:
                continue
            serious = path.name in _SOLVE_NAMES or is_test_code(path)
            if digest not in hashes or (serious and not hashes[digest][1]):
                hashes[digest] = (path, serious)
    return hashes
