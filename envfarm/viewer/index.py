"""A run directory's ``trajectories.jsonl``, indexed once by byte offset and followed as it grows.

Indexing reads each line once and keeps only its ``Entry`` and byte range; a page that shows a
whole trajectory reads that range again. Each ``refresh`` looks at the file's size: what was
appended since is indexed (a run still being written grows between two page loads), a file that
shrank or was replaced (``envfarm run --resume`` rewrites it) is indexed anew. A last line
without its newline is being written: it is left for the next refresh and a note says so. A
line that is not a trajectory is skipped with a note naming its line number; nothing else is.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envfarm.errors import EnvfarmError
from envfarm.viewer.entries import Entry, entry_of_line

TRAJECTORIES = "trajectories.jsonl"
READ_CHUNK = 8 * 1024 * 1024


class RunDirError(EnvfarmError):
    """A path given to the viewer is not a run directory."""


@dataclass(frozen=True)
class Span:
    offset: int
    length: int
    line: int


class FileIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[Entry] = []
        self.notes: list[str] = []
        self.torn: str | None = None
        """A note about the incomplete last line, while there is one."""
        self._end = 0
        self._lines = 0
        self._identity: tuple[int, int] | None = None

    def refresh(self) -> bool:
        """Index what was appended since the last call; True when anything changed."""
        try:
            stat = self.path.stat()
        except FileNotFoundError as exc:
            raise RunDirError(f"{self.path} is gone (was it moved or deleted?)") from exc
        identity = (stat.st_dev, stat.st_ino)
        if identity != self._identity or stat.st_size < self._end:
            self._reset(identity)
        if stat.st_size == self._end:
            return False
        with self.path.open("rb") as handle:
            handle.seek(self._end)
            self._scan(handle, stat.st_size)
        return True

    def read(self, entry: Entry) -> dict[str, Any]:
        span: Span = entry.locator
        with self.path.open("rb") as handle:
            handle.seek(span.offset)
            data = handle.read(span.length)
        document: dict[str, Any] = json.loads(data)
        return document

    def _reset(self, identity: tuple[int, int]) -> None:
        self.entries = []
        self.notes = []
        self.torn = None
        self._end = 0
        self._lines = 0
        self._identity = identity

    def _scan(self, handle: Any, size: int) -> None:
        position = self._end  # where ``carry`` starts in the file
        carry = b""
        remaining = size - position
        while remaining > 0:
            chunk = handle.read(min(READ_CHUNK, remaining))
            if not chunk:
                break
            remaining -= len(chunk)
            data = carry + chunk
            start = 0
            while (newline := data.find(b"\n", start)) >= 0:
                self._add(data[start:newline], position + start)
                start = newline + 1
            position += start
            carry = data[start:]
        self._end = position
        self.torn = None
        if carry.strip():
            self.torn = (
                f"the last line ({len(carry)} bytes, line {self._lines + 1}) has no newline yet: "
                "it is skipped until the run finishes writing it"
            )

    def _add(self, line: bytes, offset: int) -> None:
        self._lines += 1
        if not line.strip():
            return
        try:
            entry = entry_of_line(line, Span(offset, len(line), self._lines))
        except ValueError as exc:
            self.notes.append(f"{self.path.name} line {self._lines} is skipped: {_short(exc)}")
            return
        self.entries.append(entry)


def trajectories_file(run_dir: Path) -> Path:
    """The run's ``trajectories.jsonl``; ``RunDirError`` naming the directory when absent."""
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir} is not a directory (expected a run directory)")
    path = run_dir / TRAJECTORIES
    if not path.is_file():
        raise RunDirError(
            f"{run_dir} has no {TRAJECTORIES}: expected the output directory of `envfarm run` "
            "(or `envfarm export`)"
        )
    if not os.access(path, os.R_OK):
        raise RunDirError(f"{path} is not readable")
    return path


def _short(exc: Exception) -> str:
    text = str(exc)
    return text if len(text) < 200 else text[:200] + "..."
