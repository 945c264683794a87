"""The clean room in place: the verifier in the agent's own container, restarted.

A clean-room verifier must see what the agent left on the file system and nothing the agent
left running. A fresh container (``receive.py``) gives it both, at the price of a second
container per episode (on the btrfs driver a container's removal is the engine's costliest
work, 0.4-1.2 s of its CPU) and of carrying the changes across as an archive. Where the sandbox
can (``InPlaceGrading``), the agent's own container grades. Its helper, the container's init,
which no process of it can kill or trace, kills every other process (``end_processes``); the
tmpfs mounts are emptied once the second snapshot has seen them. Where that would leave a
trace a restart would not (``sandboxd``'s ``sweep.c``: a changed ``/dev``, IPC objects), the
engine restarts the container instead: it kills every process,
then starts it again with a fresh init and helper from read-only bind mounts, its tmpfs mounts
empty (0.5 s alone, 1 s at concurrency 4, against milliseconds for the sweep). Either way the
file system holds every change the agent made, as the carried archive would.

What carrying would not hand the verifier is decided on a listing that the helper takes
itself (``sandboxd.c``, walk: the image's ``find`` may be the agent's), against the listing
taken before the agent, by the same rules (``scope.py``, ``carry.plan_changes``):

- a watched path or a test file the agent changed or deleted needs the image's copy, which this
  container no longer has: grading falls back to a fresh container, carried as before;
- what the agent added or changed where carrying leaves things out (the hidden paths
  ``/tests``, ``/solution`` and ``/logs``, envfarm's own paths, caches such as ``__pycache__``,
  envfarm's temporary files) is removed by the helper, so a planted reward file or bytecode
  never reaches the verifier; what the image had there stays, and so do mounts.

Sidecars, volumes and networks are shared either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass

from envfarm.errors import SandboxError, SandboxGone
from envfarm.grading.cleanroom.carry import (
    CTIME_MARGIN_S,
    Listing,
    WorkspaceCarry,
    ancestors,
    parse_entries,
    plan_changes,
)
from envfarm.grading.cleanroom.scope import CarryScope
from envfarm.sandbox.base import InPlaceGrading

NAMED_PATHS = 5
"""How many of the paths that send grading to a fresh container its note names."""
SWEEP_MARGIN_S = 0.05
"""How long before the listing's clock the sweep counts a change to ``/dev`` or a bind-mounted
file as the agent's: the kernel dates files by a clock up to a tick behind (the runtime made
them while the container started, well before)."""


@dataclass(frozen=True)
class InPlace:
    carry: WorkspaceCarry
    """What the verifier receives, as carrying would have given it (no archive: it is there)."""
    remove: list[str]
    """Absolute paths the helper removes first (the top-most of what carrying leaves out)."""


async def walk(sandbox: InPlaceGrading, before: Listing) -> Listing:
    """The sandbox's entries now, listed by its helper (call once nothing of the agent's
    runs: after ``end_processes`` or ``restart_clean``)."""
    entries = await asyncio.to_thread(parse_entries, await sandbox.walk_files())
    return Listing(before.workdir, before.now, entries, list(before.mounts))


async def settle_in_place(
    sandbox: InPlaceGrading, before: Listing, scope: CarryScope, listed: Listing | None = None
) -> InPlace | str:
    """With nothing of the agent's running: the helper's walk (unless ``listed`` is it), the
    plan, the removals. The plan carried out, or why a fresh container must grade (the helper
    could not list or remove: a path too deep, an entry it may not delete; a dead sandbox
    still raises)."""
    try:
        after = listed or await walk(sandbox, before)
        planned = await asyncio.to_thread(plan_in_place, before, after, scope)
        if isinstance(planned, str):
            return planned
        await sandbox.remove_files(planned.remove)
    except SandboxGone:
        raise
    except SandboxError as exc:
        return f"the helper could not list or tidy the file system ({exc})"
    return planned


def plan_in_place(before: Listing, after: Listing, scope: CarryScope) -> InPlace | str:
    """What grading in place needs done, or why only a fresh container can grade: the paths
    that need the image's copy."""
    plan = plan_changes(before, after, scope)
    if plan.withheld or plan.restored:
        paths = [f"/{path}" for path in sorted({*plan.restored, *(p for p, _ in plan.withheld)})]
        shown = ", ".join(paths[:NAMED_PATHS])
        more = f" and {len(paths) - NAMED_PATHS} more" if len(paths) > NAMED_PATHS else ""
        return f"the agent changed or deleted a test file or a watched path ({shown}{more})"
    carry = WorkspaceCarry(
        workdir=before.workdir,
        archive=None,
        carried=plan.carry,
        deleted=plan.delete,
        restored=[],
    )
    return InPlace(carry, left_out_removals(before, after, scope))


def left_out_removals(before: Listing, after: Listing, scope: CarryScope) -> list[str]:
    """The top-most entries, added or changed since ``before``, that carrying leaves out,
    without an older entry below them, a mount, or a mount's parent directory. (What carrying
    leaves out, it leaves out below too: an older entry below a new one is left out as well.)"""
    since = before.now - CTIME_MARGIN_S
    changed = (path for path, (_, ctime) in after.entries.items() if ctime > since)
    new = sorted(path for path in changed if scope.left_out(path))
    if not new:
        return []
    kept: set[str] = set()
    for mount in scope.mounts:
        relative = mount.strip("/")
        if relative:
            kept |= {relative, *ancestors(relative)}
    tops = _top_most(new)
    below = tuple(f"{top}/" for top in tops)
    for path, (_, ctime) in after.entries.items():
        if ctime <= since and path.startswith(below):
            kept.update(ancestors(path))
    return sorted(f"/{path}" for path in _top_most(p for p in new if p not in kept))


def _top_most(paths: Iterable[str]) -> list[str]:
    """Those of ``paths`` (sorted) with none of the others above them."""
    chosen: set[str] = set()
    for path in paths:
        if not any(a in chosen for a in ancestors(path)):
            chosen.add(path)
    return sorted(chosen)
