"""The second tamper snapshot's workspace section, derived from the clean room's capture.

After the agent, the clean room's capture (``carry.read_changes``) already walks the whole file
system, with each entry's type and ctime, and archives every entry changed since the start. The
second snapshot's workspace section (``snapshot.py``: every file under the workdir but pruned
trees, by content hash; files of 8 MiB and more by size and mtime; symlinks by their target's
hash) follows from that: an entry whose ctime is not past the start (no one can set a ctime
back) keeps the digest the first snapshot found, and the others are hashed on the host from the
capture's archive. So the snapshot script skips its workspace walks (``EF_DERIVED``) and runs
beside the capture as before; its other sections are taken in the container as ever.

The derivation gives up (``None``: the caller takes the full snapshot) whenever the capture
cannot speak for the workspace: the workdir on another mount or a mount below it, a path the
listing and the snapshot would spell differently, an entry the first snapshot lacks, a changed
entry missing from the archive or of another kind there, a listing at the snapshot's cap.

The same archive gives the artifacts' copy of the changed files (``changed_tar``), so no second
``tar`` runs in the container for it.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from dataclasses import dataclass

from envfarm.grading.cleanroom.carry import CTIME_MARGIN_S, Changes, Listing
from envfarm.grading.cleanroom.scope import CarryScope
from envfarm.grading.tamper.snapshot import (
    LARGE_FILE_BYTES,
    MAX_WORKSPACE_FILES,
    WORKSPACE_PRUNED,
    Snapshot,
)
from envfarm.grading.tamper.workspace import CHANGED_TOTAL_BYTES

PRUNED = frozenset(WORKSPACE_PRUNED)


@dataclass(frozen=True)
class Derived:
    snapshot: Snapshot
    members: dict[str, tuple[tarfile.TarInfo, bytes | None]]
    """The archive's members under the workdir, by path relative to it."""

    def changed_tar(self, paths: list[str]) -> bytes | None:
        """A tar of ``paths`` (relative to the workdir, as ``workspace.export_changed`` makes
        it); None when there are none or it would exceed the cap."""
        chosen = [(path, *self.members[path]) for path in paths if path in self.members]
        if not chosen or sum(info.size for _, info, _ in chosen) > CHANGED_TOTAL_BYTES:
            return None
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
            for path, info, content in chosen:
                copy = info.replace(name=f"./{path}", deep=False)
                archive.addfile(copy, io.BytesIO(content) if content is not None else None)
        return buffer.getvalue()


def derivable(before: Snapshot, listing: Listing) -> bool:
    """Whether the capture after the agent can stand for the workspace walks of ``before``'s
    second snapshot (checked before either runs: mounts and the workdir's place)."""
    work = before.workdir.strip("/")
    if not work or before.workspace_skipped or before.workspace_truncated:
        return False
    if PRUNED & set(work.split("/")) or CarryScope(workdir=before.workdir).left_out(work):
        return False
    if not _spelled_alike(work):
        return False
    for mount in (m.strip("/") for m in listing.mounts):
        if mount and (_under(work, mount) or _under(mount, work)):
            return False
    return True


def _spelled_alike(path: str) -> bool:
    """Whether the snapshot script's lines name ``path`` as the listing does: no newline or
    backslash (``sha256sum`` escapes those) and valid UTF-8 (the script's output is decoded)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\n" not in path and "\\" not in path


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


def _members(
    archive: bytes | None, prefix: str
) -> dict[str, tuple[tarfile.TarInfo, bytes | None]] | None:
    found: dict[str, tuple[tarfile.TarInfo, bytes | None]] = {}
    if not archive:
        return found
    try:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            for member in tar:
                name = member.name.removeprefix("./").rstrip("/")
                if not name.startswith(prefix) or not (member.isfile() or member.issym()):
                    continue
                extracted = tar.extractfile(member) if member.isfile() else None
                content = extracted.read() if extracted is not None else None
                found[name[len(prefix) :]] = (member, content)
    except (tarfile.TarError, OSError, EOFError):
        return None
    return found


def _digest(kind: str, member: tarfile.TarInfo, content: bytes | None) -> str | None:
    if kind == "l":
        if not member.issym():
            return None
        target = (member.linkname + "\n").encode("utf-8", "surrogateescape")
        return "L:" + hashlib.sha256(target).hexdigest()
    if not member.isfile() or content is None:
        return None
    if member.size >= LARGE_FILE_BYTES:
        return f"B:{member.size}:{int(member.mtime)}"
    return hashlib.sha256(content).hexdigest()


def derive_workspace(
    before: Snapshot, partial: Snapshot, listing: Listing, changes: Changes
) -> Derived | None:
    """``partial`` (the second snapshot, ``workspace_derived``) with its workspace section
    filled from ``changes`` (the capture after the agent, against ``listing``); None when the
    capture cannot stand for it."""
    work = before.workdir.strip("/")
    prefix = work + "/"
    entries = changes.listing.entries
    parts = work.split("/")
    if any(entries.get("/".join(parts[: i + 1]), ("",))[0] != "d" for i in range(len(parts))):
        return None
    since = min(listing.now, before.now if before.now is not None else listing.now)
    since -= CTIME_MARGIN_S
    members = _members(changes.archive, prefix)
    if members is None:
        return None
    earlier = before.section("workspace")
    workspace: dict[str, str] = {}
    counts = {"f": 0, "l": 0}
    for path, (kind, ctime) in entries.items():
        if kind not in counts or not path.startswith(prefix):
            continue
        inside = path[len(prefix) :]
        if PRUNED & set(inside.split("/")):
            continue
        if not _spelled_alike(path):
            return None
        counts[kind] += 1
        absolute = "/" + path
        old = earlier.get(absolute)
        if ctime <= since and old is not None and old.startswith("L:") == (kind == "l"):
            workspace[absolute] = old
            continue
        member = members.get(inside)
        digest = _digest(kind, *member) if member is not None else None
        if digest is None:
            return None
        workspace[absolute] = digest
    if max(counts.values()) >= MAX_WORKSPACE_FILES:
        return None
    sections = {**partial.sections, "workspace": workspace}
    snapshot = partial.model_copy(update={"sections": sections, "workspace_derived": False})
    return Derived(snapshot, members)
