"""The agent's workspace changes as files: a tar of what it changed and a unified text diff.

The "before" side is a tar of the workdir taken on the host before the agent starts (files
under 1 MiB, 32 MiB in all, the snapshot's pruned trees left out), so the agent cannot alter
it. The "after" side is a tar of the files the snapshots say were added or modified. The diff
covers text files (UTF-8 without NUL bytes) of at most 1 MiB a side, and stops at 4 MiB.
"""

from __future__ import annotations

import difflib
import io
import shlex
import tarfile
import uuid

from envfarm.sandbox.base import Sandbox

BASELINE_FILE_BYTES = 1024 * 1024
BASELINE_TOTAL_BYTES = 32 * 1024 * 1024
CHANGED_TOTAL_BYTES = 64 * 1024 * 1024
DIFF_FILE_BYTES = 1024 * 1024
DIFF_TOTAL_CHARS = 4 * 1024 * 1024
_PRUNED = (
    ".git",
    ".hg",
    ".svn",
    "node_modules",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".tox",
    ".venv",
    "venv",
)


async def _tar_out(sandbox: Sandbox, workdir: str, select: str, cap: int) -> bytes | None:
    """Run ``select`` (printing NUL-separated paths relative to ``workdir``) and tar them."""
    staging = f"/tmp/.envfarm-ws-{uuid.uuid4().hex}.tar"
    root = shlex.quote(workdir)
    result = await sandbox.exec(
        f"cd {root} || exit 3; {select} | tar --null -T - -cf {staging} --no-recursion "
        f"2>/dev/null; size=$(stat -c %s {staging} 2>/dev/null || echo 0); "
        f'if [ "$size" -gt {cap} ]; then rm -f {staging}; echo over; fi',
        user="root",
        timeout=300,
    )
    try:
        if result.exit_code != 0 or "over" in result.stdout:
            return None
        return await sandbox.read_file(staging)
    except OSError:
        return None
    finally:
        await sandbox.exec(f"rm -f {staging}", user="root", timeout=60)


async def capture_baseline(sandbox: Sandbox, workdir: str) -> bytes | None:
    """A tar of the workdir's small files; None when it is too big or cannot be made."""
    if workdir in ("", "/"):
        return None
    prune = " -o ".join(f"-name {shlex.quote(name)}" for name in _PRUNED)
    select = f"find . \\( {prune} \\) -prune -o -type f -size -{BASELINE_FILE_BYTES + 1}c -print0"
    return await _tar_out(sandbox, workdir, select, BASELINE_TOTAL_BYTES)


async def export_changed(sandbox: Sandbox, workdir: str, paths: list[str]) -> bytes | None:
    """A tar of ``paths`` (relative to the workdir) as they are now."""
    if not paths or workdir in ("", "/"):
        return None
    listing = "".join(f"./{path}\0" for path in paths)
    name = f"/tmp/.envfarm-list-{uuid.uuid4().hex}"
    await sandbox.write_file(name, listing.encode(), mode=0o600)
    try:
        return await _tar_out(sandbox, workdir, f"cat {name}", CHANGED_TOTAL_BYTES)
    finally:
        await sandbox.exec(f"rm -f {name}", user="root", timeout=60)


def _members(data: bytes | None) -> tuple[dict[str, bytes], set[str]]:
    """Small regular files of a tar by path, and the paths of every member."""
    files: dict[str, bytes] = {}
    names: set[str] = set()
    if not data:
        return files, names
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive:
            name = member.name.removeprefix("./")
            names.add(name)
            if member.isfile() and member.size <= DIFF_FILE_BYTES:
                extracted = archive.extractfile(member)
                if extracted is not None:
                    files[name] = extracted.read()
    return files, names


def _text(data: bytes) -> list[str] | None:
    if b"\0" in data:
        return None
    try:
        return data.decode().splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def _side(path: str, absent: bool, files: dict[str, bytes], names: set[str]) -> list[str] | str:
    """The lines of one side of a file's diff, or why there are none."""
    if absent:
        return []
    if path not in names:
        return "no copy was taken"
    if path not in files:
        return "binary or large file"
    lines = _text(files[path])
    return "binary or large file" if lines is None else lines


def unified_diff(
    baseline: bytes | None,
    changed: bytes | None,
    added: list[str],
    modified: list[str],
    deleted: list[str],
) -> str:
    """A ``diff -u`` style patch of the text files among the changes (size-capped)."""
    before, after = _members(baseline), _members(changed)
    chunks: list[str] = []
    size = 0
    for path in sorted(added + modified + deleted):
        old = _side(path, path in added, *before)
        new = _side(path, path in deleted, *after)
        if isinstance(old, str) or isinstance(new, str):
            why = old if isinstance(old, str) else new
            chunk = f"# {path}: changed ({why})\n"
        else:
            lines = difflib.unified_diff(
                old,
                new,
                fromfile="/dev/null" if path in added else f"a/{path}",
                tofile="/dev/null" if path in deleted else f"b/{path}",
            )
            chunk = "".join(
                line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                for line in lines
            )
        if size + len(chunk) > DIFF_TOTAL_CHARS:
            chunks.append(f"# diff truncated at {DIFF_TOTAL_CHARS} characters\n")
            break
        chunks.append(chunk)
        size += len(chunk)
    return "".join(chunks)
