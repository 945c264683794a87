"""What the agent changed in its container's file system, captured for a clean-room verifier.

Before the agent, one ``find`` (as root, ``-xdev`` from ``/``) lists every entry of the
container's own file system with its type, and the container's clock and mount points are read;
the listing is kept on the host, out of the agent's reach. After the agent, the same listing
again, with each entry's ctime. *Changed* are the entries whose ctime is past the start (less a
margin for the kernel's coarse file clock: no one can set a ctime back, so every write, chmod,
chown, rename or ``touch -d`` shows), and those that are new or changed type; *deleted* are those
gone or of another type. ``scope.py`` decides what of that the verifier receives: envfarm's own
paths, mounts, hidden paths and caches are left out, watched paths (interpreters, site hooks,
test runners and plugins) are withheld and flagged, the workdir's test files are restored. The
changed entries go into one tar (no recursion, hard links as files, numeric owners and modes,
binary-safe).

The agent may have replaced ``find`` and ``tar`` in its container, so the host applies the scope
itself and checks the archive before it goes anywhere: each member must be an entry it asked for,
a regular file, a directory or a symlink, and must not lie below a symlink or a file. Anything
else is dropped and flagged ``tamper:carry_rejected``.
"""

from __future__ import annotations

import asyncio
import io
import shlex
import tarfile
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field

from envfarm.errors import GradingError
from envfarm.grading.cleanroom.scope import CACHE_NAMES, LEFT_OUT_GLOBS, LEFT_OUT_ROOTS, CarryScope
from envfarm.sandbox.base import Sandbox

CTIME_MARGIN_S = 2.0
MAX_LISTING_BYTES = 256 * 1024 * 1024
MAX_CARRY_BYTES = 512 * 1024 * 1024
LIST_TIMEOUT_S = 300.0
_KINDS = frozenset("fdl")
_NONE = ("", 0.0)
_PRUNE = " -o ".join(
    [f"-name {name}" for name in sorted(CACHE_NAMES)]
    + [f"-path ./{root}" for root in LEFT_OUT_ROOTS]
    + [f"-path './{glob}'" for glob in LEFT_OUT_GLOBS]
)

LIST_SCRIPT = rf"""
set +e
export LC_ALL=C
W="${{EF_WORKDIR:-$PWD}}"
[ -n "$EF_FIXED" ] || W="$(cd "$W" 2>/dev/null && pwd -P || printf '%s' "$W")"
printf 'now %s\n' "$(date +%s.%N 2>/dev/null)"
read -r up _ < /proc/uptime 2>/dev/null; read -r st < /proc/1/stat 2>/dev/null; st="${{st##*) }}"
set -- $st; printf 'clock %s %s\n' "$up" "${{20}}"
printf 'workdir %s\n' "$W"
[ "$(find / -maxdepth 0 -printf ok 2>/dev/null)" = ok ] || {{ echo "missing GNU find"; exit 0; }}
while read -r _ _ _ _ m _; do printf 'mount %s\n' "$m"; done < /proc/self/mountinfo
cd / || exit 3
if [ -z "$EF_SINCE" ]; then
  find . -xdev -mindepth 1 \( {_PRUNE} \) -prune -o -printf '%y %C@ %P\0' > "$EF_OUT" 2>/dev/null
else  # one walk: the listing, and the names of the entries changed since the start
  find . -xdev -mindepth 1 \( {_PRUNE} \) -prune -o -fprintf "$EF_OUT" '%y %C@ %P\0' \
    -newerct "@$EF_SINCE" \( -type f -o -type d -o -type l \) -fprintf "$EF_OUT.names" '%P\0' \
    2>/dev/null
fi
code=$?
echo "listed $code $(stat -c %s "$EF_OUT" 2>/dev/null || echo 0)"
if [ -n "$EF_SINCE" ]; then
  tar --null --no-recursion --numeric-owner --hard-dereference --ignore-failed-read \
    -T "$EF_OUT.names" -cf "$EF_OUT.tar" 2>"$EF_OUT.err"
  echo "tar $? $(stat -c %s "$EF_OUT.tar" 2>/dev/null || echo 0)"
  tail -c 2000 "$EF_OUT.err" | tr '\n' ' '; echo
fi
"""


@dataclass
class Listing:
    """The container's entries (path relative to ``/`` -> type letter and ctime) at one moment,
    with the agent's (resolved) workdir and the mount points."""

    workdir: str
    now: float
    entries: dict[str, tuple[str, float]] = field(default_factory=dict)
    mounts: list[str] = field(default_factory=list)
    started: float | None = None
    """When the container started, on its clock (None: unknown)."""
    late: frozenset[str] = frozenset()
    """Entries written after the listed container started (a reused listing, ``pristine.py``):
    another container may lack them, so one only counts as changed when its ctime says so."""


@dataclass(frozen=True)
class Plan:
    carry: list[str]
    """Entries to copy, parents before children."""
    delete: list[str]
    """Entries to remove first, top-most only."""
    restored: list[str]
    """Test files of the workdir the agent changed or deleted, left as the image has them."""
    withheld: list[tuple[str, str]] = field(default_factory=list)
    """Watched paths the agent changed or deleted, left as the image has them, and why."""


@dataclass
class WorkspaceCarry:
    """What the verifier's container receives (paths relative to ``/``)."""

    workdir: str
    archive: bytes | None
    carried: list[str]
    deleted: list[str]
    restored: list[str]
    withheld: list[tuple[str, str]] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    """Archive members dropped by the host's check, and why."""


def ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def parse_entries(data: bytes) -> dict[str, tuple[str, float]]:
    entries: dict[str, tuple[str, float]] = {}
    for record in data.split(b"\0"):
        try:
            kind, ctime, raw = record.split(b" ", 2)
            path = raw.decode("utf-8", "surrogateescape")
            framed = f"/{path}/"  # an empty, "." or ".." part shows as "//", "/./", "/../"
            if "//" in framed or "/./" in framed or "/../" in framed:
                continue
            entries[path] = (kind.decode("ascii"), float(ctime))
        except ValueError:  # an empty record, or a line a replaced find made up
            continue
    return entries


def _unescape_mount(text: str) -> str:
    """``/proc/self/mountinfo`` escapes space, tab, newline and backslash as octal."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        text = text.replace(code, char)
    return text


def _started(now: float, clock: str) -> float | None:
    """The start of the container's first process, from ``/proc/uptime`` and its
    ``/proc/1/stat`` start time (clock ticks of 1/100 s, Linux's USER_HZ)."""
    try:
        uptime, ticks = clock.split()
        return now - float(uptime) + int(ticks) / 100
    except ValueError:
        return None


async def container_clock(sandbox: Sandbox) -> float:
    """The container's clock now (``date`` as root)."""
    result = await sandbox.exec("date +%s.%N", user="root", timeout=60)
    try:
        return float(result.stdout.strip())
    except ValueError:
        raise GradingError("clean-room grading needs GNU date in the image") from None


@dataclass
class _Listed:
    listing: Listing
    tar_size: int | None = None
    archive: bytes | None = None


async def _list(
    sandbox: Sandbox, workdir: str | None, out: str, *, fixed: bool, since: float | None
) -> _Listed:
    env = {"EF_WORKDIR": workdir or "", "EF_OUT": out, "EF_FIXED": "1" if fixed else ""}
    if since is not None:
        env["EF_SINCE"] = f"{since:.6f}"
    result = await sandbox.exec(LIST_SCRIPT, env=env, user="root", timeout=LIST_TIMEOUT_S)
    if result.timed_out:
        raise GradingError(f"listing the container's files timed out after {LIST_TIMEOUT_S:g}s")
    lines = result.stdout.splitlines()
    fields = dict(line.partition(" ")[::2] for line in lines)
    listing = Listing(workdir=fields.get("workdir", workdir or "/") or "/", now=0.0)
    listing.mounts = [
        _unescape_mount(line[6:]) for line in lines if line.startswith("mount ") and line[6:]
    ]
    if "missing" in fields:
        raise GradingError(
            "clean-room grading needs GNU find in the image: install findutils, or set "
            '[verifier] environment_mode = "shared"'
        )
    try:
        listing.now = float(fields.get("now", ""))
    except ValueError:
        raise GradingError("clean-room grading needs GNU date in the image") from None
    listing.started = _started(listing.now, fields.get("clock", ""))
    code, _, size = fields.get("listed", "").partition(" ")
    if code not in ("0", "1"):
        raise GradingError(f"could not list the container's files: {result.stderr[-500:]}")
    if int(size or 0) > MAX_LISTING_BYTES:
        raise GradingError(f"the container's file listing is over {MAX_LISTING_BYTES} bytes")
    listed = _Listed(listing)
    if since is not None:
        words = fields.get("tar", "").split()
        if len(words) != 2 or words[0] not in ("0", "1") or not words[1].isdigit():
            tail = lines[-1] if lines else ""
            raise GradingError(f"could not archive the agent's changes: {tail[-1000:]}")
        listed.tar_size = int(words[1])
        if listed.tar_size > MAX_CARRY_BYTES:
            raise GradingError(
                f"the agent's changes are {listed.tar_size} bytes as a tar, over the "
                f"{MAX_CARRY_BYTES}-byte limit of clean-room grading"
            )
    reads = [sandbox.read_file(out)]
    if listed.tar_size:
        reads.append(sandbox.read_file(f"{out}.tar"))
    data, *archive = await asyncio.gather(*reads)
    listing.entries = parse_entries(data)
    listed.archive = archive[0] if archive else None
    return listed


async def list_workspace(sandbox: Sandbox, workdir: str | None) -> Listing:
    """List the container's own file system as root, before the agent (``workdir`` resolved;
    ``None``: the container's working directory)."""
    out = f"/tmp/.envfarm-listing-{uuid.uuid4().hex}"
    try:
        return (await _list(sandbox, workdir, out, fixed=False, since=None)).listing
    finally:
        await sandbox.exec(f"rm -f {out}", user="root", timeout=60)


def plan_changes(before: Listing, after: Listing, scope: CarryScope | None = None) -> Plan:
    """The changes first, then the scope's rules on them alone (a listing holds every entry of
    the file system, its changes a few)."""
    scope = scope or CarryScope(workdir=before.workdir, mounts=before.mounts)
    since = before.now - CTIME_MARGIN_S
    old, new = before.entries, after.entries
    gone = {path for path, (kind, _) in old.items() if new.get(path, _NONE)[0] != kind}
    gone -= {p for p in before.late & gone if p in new and new[p][1] <= since}
    touched = {
        path
        for path, (kind, ctime) in new.items()
        if kind in _KINDS
        and (ctime > since or (old.get(path, _NONE)[0] != kind and path not in before.late))
    }
    gone = {path for path in gone if not scope.left_out(path)}
    touched = {path for path in touched if not scope.left_out(path)}
    restored = {
        path
        for path in gone | touched
        if old.get(path, _NONE)[0] not in ("", "d") and scope.test_file(path)
    }
    withheld: dict[str, str] = {}
    for path in sorted(gone | touched):
        why = scope.withheld(path)
        if why is not None and not any(a in withheld for a in ancestors(path)):
            withheld[path] = why
    kept = restored | set(withheld)
    kept |= {a for path in kept for a in ancestors(path)}
    held = restored | set(withheld)
    carry = [path for path in sorted(touched - kept) if not any(a in held for a in ancestors(path))]
    removed = gone - kept
    delete = sorted(p for p in removed if not any(a in removed for a in ancestors(p)))
    return Plan(
        carry=carry, delete=delete, restored=sorted(restored), withheld=sorted(withheld.items())
    )


def check_archive(
    data: bytes, wanted: list[str], before: Listing, left: Collection[str] = ()
) -> tuple[bytes, list[tuple[str, str]]]:
    """``data`` with every member the host did not ask for, or cannot place safely, dropped;
    members in ``left`` (changed, but the plan leaves them as the image has them) are dropped
    without a complaint."""
    asked = set(wanted)
    dropped = False
    dirs: set[str] = set()
    links: set[str] = set()
    kept: list[tuple[tarfile.TarInfo, bytes | None]] = []
    rejected: list[tuple[str, str]] = []
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive:
            name = member.name.removeprefix("./").rstrip("/")
            problem = None
            if name in left and name not in asked:
                dropped = True
                continue
            if name not in asked:
                problem = "not an entry that was asked for"
            elif not (member.isfile() or member.isdir() or member.issym()):
                problem = "not a regular file, directory or symlink"
            else:
                for parent in ancestors(name):
                    was_dir = before.entries.get(parent, ("", 0.0))[0] == "d"
                    if parent not in dirs and (parent in links or not was_dir):
                        problem = f"below {parent}, which is not a directory"
                        break
            if problem is not None:
                rejected.append((name, problem))
                continue
            if member.isdir():
                dirs.add(name)
            elif member.issym():
                links.add(name)
            extracted = archive.extractfile(member) if member.isfile() else None
            kept.append((member, extracted.read() if extracted is not None else None))
    if not rejected and not dropped:
        return data, []
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as clean:
        for member, content in kept:
            clean.addfile(member, io.BytesIO(content) if content is not None else None)
    return buffer.getvalue(), rejected


@dataclass
class Changes:
    """What the agent's container showed after the agent: its listing, and an archive of every
    entry changed since the start (its own ``find`` and ``tar``: untrusted)."""

    listing: Listing
    archive: bytes | None


async def read_changes(sandbox: Sandbox, before: Listing, *, tidy: bool = True) -> Changes:
    """One command lists the container again and archives every entry changed since
    ``before`` (call after the agent); then the listing and the archive are read, side by
    side. ``tidy=False``: leave the files (the container is discarded next)."""
    out = f"/tmp/.envfarm-carry-{uuid.uuid4().hex}"
    since = before.now - CTIME_MARGIN_S
    try:
        listed = await _list(sandbox, before.workdir, out, fixed=True, since=since)
    finally:
        if tidy:
            await sandbox.exec(f"rm -f {shlex.quote(out)}*", user="root", timeout=60)
    return Changes(listed.listing, listed.archive)


def settle_carry(
    before: Listing, changes: Changes, scope: CarryScope | None = None
) -> WorkspaceCarry:
    """The host's plan over ``changes``, and the archive checked against it."""
    scope = scope or CarryScope(workdir=before.workdir, mounts=before.mounts)
    plan = plan_changes(before, changes.listing, scope)
    archive: bytes | None = None
    rejected: list[tuple[str, str]] = []
    if plan.carry and changes.archive is None:
        raise GradingError("could not archive the agent's changes: the archive is missing")
    if plan.carry and changes.archive is not None:
        left = set(changes.listing.entries) - set(plan.carry)
        archive, rejected = check_archive(changes.archive, plan.carry, before, left)
    return WorkspaceCarry(
        workdir=before.workdir,
        archive=archive,
        carried=plan.carry,
        deleted=plan.delete,
        restored=plan.restored,
        withheld=plan.withheld,
        rejected=rejected,
    )


async def capture_changes(
    sandbox: Sandbox, before: Listing, scope: CarryScope | None = None
) -> WorkspaceCarry:
    """``read_changes`` then ``settle_carry``."""
    return settle_carry(before, await read_changes(sandbox, before), scope)
