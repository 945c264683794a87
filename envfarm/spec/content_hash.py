"""``content_hash``: what identifies exactly the files a task was loaded from.

sha256 over the sorted relative paths of every file, each with its exec bit and the sha256 of
its bytes (a symlink hashes its target text). ``__pycache__``, ``.git`` and ``*.pyc`` are
skipped, as they change without the task changing. The same files give the same hash, wherever
the directory is; a legacy task's hash is that of its own directory, not of its staged tests.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from envfarm.errors import TaskSpecError

_SKIPPED_DIRS = frozenset({"__pycache__", ".git"})
_SKIPPED_SUFFIXES = (".pyc",)


def _hashed_files(root: Path) -> Iterator[str]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIPPED_DIRS]
        linked_dirs = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        for name in [*filenames, *linked_dirs]:
            if not name.endswith(_SKIPPED_SUFFIXES):
                yield os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")


def content_hash(root: Path) -> str:
    """sha256 hex of the task's files; raises TaskSpecError when one cannot be read."""
    digest = hashlib.sha256()
    for relative in sorted(_hashed_files(root)):
        path = root / relative
        try:
            if path.is_symlink():
                kind, data = "l", hashlib.sha256(os.readlink(path).encode()).hexdigest()
            else:
                with path.open("rb") as handle:
                    data = hashlib.file_digest(handle, "sha256").hexdigest()
                kind = "x" if path.stat().st_mode & 0o111 else "-"
        except OSError as exc:
            raise TaskSpecError(str(path), f"cannot read: {exc.strerror or exc}") from exc
        digest.update(f"{kind} {data} {relative}\0".encode())
    return digest.hexdigest()
