"""What the agent changed in its workdir, captured for a clean-room verifier (``cleanroom.py``).

Before the agent, one ``find`` (as root) lists every entry of the workdir with its type, and the
container's clock is read; the listing is kept on the host, out of the agent's reach. After the
agent, the same listing again, with each entry's ctime. *Changed* are the entries whose ctime is
past the start (less a margin for the kernel's coarse file clock: no one can set a ctime back,
so every write, chmod, rename or ``touch -d`` shows), and those that are new or changed type;
*deleted* are those gone or of another type. Caches (``__pycache__``, ``.pytest_cache``, ...)
are left out; everything else counts, ``.git`` and ``node_modules`` included. The changed
entries go into one tar (no recursion, hard links as files, numeric owners, binary-safe).

Test files that existed before the agent (the names tamper detection watches: ``test_*.py``,
anything under ``tests/``, ...) are neither carried nor deleted, and neither are the directories
above them: the verifier's container keeps the image's copies, as if the agent never touched
them.

The agent may have replaced ``find`` and ``tar`` in its container, so the host checks the
archive before it goes anywhere: each member must be an entry it asked for, a regular file, a
directory or a symlink, and must not lie below a symlink or a file. Anything else is dropped and
flagged ``tamper:carry_rejected``.
"""

from __future__ import annotations

import io
import shlex
import tarfile
import uuid
from dataclasses import dataclass, field

from envfarm.errors import GradingError
from envfarm.grading.tamper import is_test_file
from envfarm.sandbox.base import Sandbox

CARRY_PRUNED = ("__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache")
CTIME_MARGIN_S = 2.0
MAX_LISTING_BYTES = 256 * 1024 * 1024
MAX_CARRY_BYTES = 512 * 1024 * 1024
LIST_TIMEOUT_S = 300.0
_KINDS = frozenset("fdl")
_PRUNE = " -o ".join(f"-name {name}" for name in CARRY_PRUNED)

LIST_SCRIPT = rf"""
set +e
export LC_ALL=C
W="${{EF_WORKDIR:-$PWD}}"
[ -n "$EF_FIXED" ] || W="$(cd "$W" 2>/dev/null && pwd -P || printf '%s' "$W")"
printf 'now %s\n' "$(date +%s.%N 2>/dev/null)"
printf 'workdir %s\n' "$W"
[ "$(find / -maxdepth 0 -printf ok 2>/dev/null)" = ok ] || {{ echo "missing GNU find"; exit 0; }}
[ "$W" = / ] && {{ echo root; exit 0; }}
cd "$W" 2>/dev/null || {{ echo absent; exit 0; }}
find . -mindepth 1 \( {_PRUNE} \) -prune -o -printf '%y %C@ %P\0' > "$EF_OUT" 2>/dev/null
code=$?
echo "listed $code $(stat -c %s "$EF_OUT" 2>/dev/null || echo 0)"
"""


@dataclass
class Listing:
    """The workdir's entries (relative path -> type letter and ctime) at one moment."""

    workdir: str
    now: float
    entries: dict[str, tuple[str, float]] = field(default_factory=dict)
    present: bool = True


@dataclass(frozen=True)
class Plan:
    carry: list[str]
    """Entries to copy, parents before children."""
    delete: list[str]
    """Entries to remove first, top-most only."""
    restored: list[str]
    """Test files the agent changed or deleted, left as the image has them."""


@dataclass
class WorkspaceCarry:
    """What the verifier's container receives from the workdir."""

    workdir: str
    archive: bytes | None
    carried: list[str]
    deleted: list[str]
    restored: list[str]
    rejected: list[tuple[str, str]] = field(default_factory=list)
    """Archive members dropped by the host's check, and why."""


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _parse_entries(data: bytes) -> dict[str, tuple[str, float]]:
    entries: dict[str, tuple[str, float]] = {}
    for record in data.split(b"\0"):
        try:
            kind, ctime, raw = record.split(b" ", 2)
            path = raw.decode("utf-8", "surrogateescape")
            parts = path.split("/")
            if path.startswith("/") or any(p in ("", ".", "..") for p in parts):
                continue
            entries[path] = (kind.decode("ascii"), float(ctime))
        except ValueError:  # an empty record, or a line a replaced find made up
            continue
    return entries


async def list_workspace(sandbox: Sandbox, workdir: str | None, *, fixed: bool = False) -> Listing:
    """List the workdir (``None``: the container's working directory) as root."""
    out = f"/tmp/.envfarm-listing-{uuid.uuid4().hex}"
    env = {"EF_WORKDIR": workdir or "", "EF_OUT": out, "EF_FIXED": "1" if fixed else ""}
    try:
        result = await sandbox.exec(LIST_SCRIPT, env=env, user="root", timeout=LIST_TIMEOUT_S)
        if result.timed_out:
            raise GradingError(f"listing the workdir timed out after {LIST_TIMEOUT_S:g}s")
        fields = dict(line.partition(" ")[::2] for line in result.stdout.splitlines())
        listing = Listing(workdir=fields.get("workdir", workdir or ""), now=0.0)
        if "missing" in fields or "root" in fields:
            raise GradingError(
                "clean-room grading needs GNU find in the image and a workdir other than /: "
                "install findutils, set [environment] workdir, or set [verifier] "
                'environment_mode = "shared"'
            )
        try:
            listing.now = float(fields.get("now", ""))
        except ValueError:
            raise GradingError("clean-room grading needs GNU date in the image") from None
        if "absent" in fields:
            listing.present = False
            return listing
        code, _, size = fields.get("listed", "").partition(" ")
        if code not in ("0", "1"):
            raise GradingError(
                f"could not list the workdir {listing.workdir}: {result.stderr[-500:]}"
            )
        if int(size or 0) > MAX_LISTING_BYTES:
            raise GradingError(f"the workdir's listing is over {MAX_LISTING_BYTES} bytes")
        listing.entries = _parse_entries(await sandbox.read_file(out))
        return listing
    finally:
        await sandbox.exec(f"rm -f {out}", user="root", timeout=60)


def plan_changes(before: Listing, after: Listing) -> Plan:
    since = before.now - CTIME_MARGIN_S
    old, new = before.entries, after.entries
    gone = {path for path, (kind, _) in old.items() if new.get(path, ("", 0.0))[0] != kind}
    touched = {
        path
        for path, (kind, ctime) in new.items()
        if kind in _KINDS and (ctime > since or old.get(path, ("", 0.0))[0] != kind)
    }
    restored = {
        path
        for path, (kind, _) in old.items()
        if kind != "d" and (path in gone or path in touched) and is_test_file(path)
    }
    kept = restored | {a for path in restored for a in _ancestors(path)}
    carry = [
        path for path in sorted(touched - kept) if not any(a in restored for a in _ancestors(path))
    ]
    removed = gone - kept
    delete = sorted(p for p in removed if not any(a in removed for a in _ancestors(p)))
    return Plan(carry=carry, delete=delete, restored=sorted(restored))


def check_archive(
    data: bytes, wanted: list[str], before: Listing
) -> tuple[bytes, list[tuple[str, str]]]:
    """``data`` with every member the host did not ask for, or cannot place safely, dropped."""
    asked = set(wanted)
    dirs: set[str] = set()
    links: set[str] = set()
    kept: list[tuple[tarfile.TarInfo, bytes | None]] = []
    rejected: list[tuple[str, str]] = []
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive:
            name = member.name.removeprefix("./").rstrip("/")
            problem = None
            if name not in asked:
                problem = "not an entry that was asked for"
            elif not (member.isfile() or member.isdir() or member.issym()):
                problem = "not a regular file, directory or symlink"
            else:
                for parent in _ancestors(name):
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
    if not rejected:
        return data, []
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as clean:
        for member, content in kept:
            clean.addfile(member, io.BytesIO(content) if content is not None else None)
    return buffer.getvalue(), rejected


async def _tar_out(sandbox: Sandbox, workdir: str, paths: list[str]) -> bytes:
    token = uuid.uuid4().hex
    names, staging, errors = (
        f"/tmp/.envfarm-carry-{token}.{ext}" for ext in ("list", "tar", "err")
    )
    listing = b"".join(f"./{path}".encode("utf-8", "surrogateescape") + b"\0" for path in paths)
    await sandbox.write_file(names, listing, mode=0o600)
    try:
        result = await sandbox.exec(
            f"cd {shlex.quote(workdir)} || exit 3; tar --null --no-recursion --numeric-owner "
            f"--hard-dereference --ignore-failed-read -T {names} -cf {staging} 2>{errors}; "
            f'echo "tar $? $(stat -c %s {staging} 2>/dev/null || echo 0)"; tail -c 2000 {errors}',
            user="root",
            timeout=LIST_TIMEOUT_S,
        )
        first, _, rest = result.stdout.partition("\n")
        words = first.split()
        if result.timed_out or len(words) != 3 or words[0] != "tar" or words[1] not in ("0", "1"):
            why = "timed out" if result.timed_out else (rest or result.stderr)[-1000:]
            raise GradingError(f"could not archive the agent's workdir changes: {why}")
        if int(words[2]) > MAX_CARRY_BYTES:
            raise GradingError(
                f"the agent's workdir changes are {words[2]} bytes as a tar, over the "
                f"{MAX_CARRY_BYTES}-byte limit of clean-room grading"
            )
        return await sandbox.read_file(staging)
    finally:
        await sandbox.exec(f"rm -f {names} {staging} {errors}", user="root", timeout=60)


async def capture_changes(sandbox: Sandbox, before: Listing) -> WorkspaceCarry:
    """The agent's changes to the workdir, listed in ``before`` (call after the agent)."""
    after = await list_workspace(sandbox, before.workdir, fixed=True)
    plan = plan_changes(before, after)
    archive: bytes | None = None
    rejected: list[tuple[str, str]] = []
    if plan.carry:
        archive, rejected = check_archive(
            await _tar_out(sandbox, before.workdir, plan.carry), plan.carry, before
        )
    return WorkspaceCarry(
        workdir=before.workdir,
        archive=archive,
        carried=plan.carry,
        deleted=plan.delete,
        restored=plan.restored,
        rejected=rejected,
    )
