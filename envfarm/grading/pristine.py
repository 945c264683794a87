"""What a fresh container of an image looks like before any agent, taken once per image.

Before the agent, grading needs three things about the container: the clean room's listing of
its whole file system, the first tamper snapshot, and (for the artifacts) a copy of the
workdir. For a given image and task they are the same in every episode: the container starts
from the image's layers, and envfarm puts the same files into it (the task's solution, its bind
files). So the first episode of an image and task takes them in its own container, as
before, and the later ones reuse them; an episode then reads only its container's clock (the
``since`` of the ctime comparisons after the agent must be its own).

In the reused listing, the entries whose ctime is not older than the container that was listed
are marked *late*: envfarm or the image's entrypoint wrote them after the start, and another
container may lack them or have them otherwise, so a later episode counts one as changed only
by its ctime, never because its type differs or it is new. Nothing the agent does can reach
the cache: it is written before the agent starts.

An episode without the solution (``check``'s nop) differs from the oracle's only under
``/solution``, which the listing and the workdir copy leave out: when an oracle's state of the
same image and task is there, it takes that, with the snapshot's ``/solution`` lines replaced
by what its own container holds there (one small exec, with the clock read).

The key is the image's id (content-addressed), the task's content hash (its solution, bind
files and compose file), the workdir, what the episode takes (listing, snapshot, copy, the
solution uploaded), and the scripts that take them. Entries live in memory and, compressed,
in ``$XDG_CACHE_HOME/envfarm/pristine/`` so later runs reuse them (``ENVFARM_PRISTINE_CACHE=0``
turns the cache off). Concurrent episodes of one key in a process wait for the first one's;
a key is written to disk once per process, on a thread (an episode that took its state afresh,
because its container had no usable clock, does not write it again).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gzip
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from envfarm.grading.cleanroom.carry import LIST_SCRIPT, Listing
from envfarm.grading.tamper.snapshot import MAX_HIDDEN, SNAPSHOT_SCRIPT, Snapshot
from envfarm.paths import user_cache_dir
from envfarm.settings import PRISTINE_CACHE_ENV, current

VERSION = 2
"""Of the stored format; ``READABLE`` versions are read too."""
READABLE = (1, 2)
KEY_SALT = "1"
"""Changed when what a key must cover changes."""
CTIME_MARGIN_S = 1.0
DISABLE_VARIABLE = PRISTINE_CACHE_ENV
MAX_BASELINE_BYTES = 8 * 1024 * 1024
MAX_IN_MEMORY = 256


@dataclass(frozen=True)
class Pristine:
    listing: Listing | None
    """Entries as the image has them; ``now`` is the listed container's (replace it)."""
    snapshot: Snapshot | None
    baseline: bytes | None


@functools.lru_cache(maxsize=1024)
def pristine_key(
    image_id: str,
    task_hash: str,
    workdir: str | None,
    *,
    listing: bool,
    snapshot: bool,
    baseline: bool,
    solution: bool,
) -> str:
    parts = [KEY_SALT, image_id, task_hash, workdir or "", LIST_SCRIPT, SNAPSHOT_SCRIPT]
    parts += [str(int(flag)) for flag in (listing, snapshot, baseline, solution)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def image_entries(listing: Listing) -> Listing | None:
    """``listing`` with its entries written after the container started marked ``late`` (None
    when the start is unknown)."""
    if listing.started is None:
        return None
    cutoff = listing.started - CTIME_MARGIN_S
    late = frozenset(p for p, (_, ctime) in listing.entries.items() if ctime >= cutoff)
    return replace(listing, entries=dict(listing.entries), mounts=list(listing.mounts), late=late)


def without_solution(oracle: Pristine, solution: dict[str, str]) -> Pristine | None:
    """The state an oracle's container showed, as a container of the same image and task
    without the uploaded solution shows it: the same but for ``/solution`` (out of the
    listing and the workdir copy), whose snapshot lines are replaced by ``solution``, what
    this container holds there. None when the snapshot's cap on hidden files could tell
    them apart."""
    snapshot = oracle.snapshot
    if snapshot is not None:
        hidden = snapshot.section("hidden")
        kept = {p: d for p, d in hidden.items() if not p.startswith("/solution/")}
        if len(hidden) >= MAX_HIDDEN or len(kept) + len(solution) >= MAX_HIDDEN:
            return None
        sections = {**snapshot.sections, "hidden": kept | solution}
        snapshot = snapshot.model_copy(update={"sections": sections})
    return replace(oracle, snapshot=snapshot)


def _encode(pristine: Pristine) -> bytes:
    data: dict[str, Any] = {"version": VERSION}
    if pristine.listing is not None:
        listing = pristine.listing
        data["listing"] = {
            "workdir": listing.workdir,
            "mounts": listing.mounts,
            "entries": [[p, k, c] for p, (k, c) in listing.entries.items()],
            "late": sorted(listing.late),
        }
    if pristine.snapshot is not None:
        data["snapshot"] = pristine.snapshot.model_dump(mode="json")
    data["baseline"] = pristine.baseline is not None
    return gzip.compress(json.dumps(data).encode(), compresslevel=1)


def _decode(raw: bytes, baseline: bytes | None) -> Pristine | None:
    data = json.loads(gzip.decompress(raw))
    if data.get("version") not in READABLE or bool(data.get("baseline")) != (baseline is not None):
        return None
    listing = None
    if (shown := data.get("listing")) is not None:
        entries = {str(p): (str(k), float(c)) for p, k, c in shown["entries"]}
        mounts = [str(m) for m in shown["mounts"]]
        late = frozenset(str(p) for p in shown.get("late", ()))  # version 1: dropped instead
        listing = Listing(str(shown["workdir"]), 0.0, entries, mounts, late=late)
    snapshot = None
    if (taken := data.get("snapshot")) is not None:
        snapshot = Snapshot.model_validate(taken)
    return Pristine(listing, snapshot, baseline)


class PristineCache:
    """Pristine states by key, in memory and (``root`` not None) on disk."""

    def __init__(self, root: Path | None) -> None:
        self.root = root
        self._memory: dict[str, Pristine] = {}
        self._taking: dict[str, asyncio.Future[Pristine | None]] = {}

    async def lookup(self, key: str) -> Pristine | None:
        """The cached state, waiting for another episode that is taking it; None: the caller
        takes it and must ``settle`` the key (with None when it could not)."""
        loop = asyncio.get_running_loop()
        while True:
            if (found := self._memory.get(key)) is not None:
                return found
            pending = self._taking.get(key)
            if pending is None or pending.get_loop() is not loop:
                break
            if (found := await asyncio.shield(pending)) is not None:
                return found
        self._taking[key] = loop.create_future()
        found = await asyncio.to_thread(self._read, key)
        if found is not None:
            self.settle(key, found, store=False)
        return found

    async def peek(self, key: str) -> Pristine | None:
        """The cached state (waiting for an episode that is taking it), or None; unlike
        ``lookup``, never leaves the key to the caller."""
        loop = asyncio.get_running_loop()
        while (found := self._memory.get(key)) is None:
            pending = self._taking.get(key)
            if pending is None or pending.get_loop() is not loop:
                break
            if (found := await asyncio.shield(pending)) is not None:
                return found
        if found is None and (found := await asyncio.to_thread(self._read, key)) is not None:
            self._memory.setdefault(key, found)
        return found

    def settle(self, key: str, pristine: Pristine | None, *, store: bool = True) -> None:
        pending = self._taking.pop(key, None)
        if pending is not None and not pending.done():
            pending.set_result(pristine)
        if pristine is None:
            return
        known = key in self._memory
        self._memory[key] = pristine
        while len(self._memory) > MAX_IN_MEMORY:
            del self._memory[next(iter(self._memory))]
        if store and self.root is not None and not known:
            self._store(key, pristine)

    def _store(self, key: str, pristine: Pristine) -> None:
        """Write the state to disk, on a thread when called on an event loop: at thousands
        of episodes a second, file system calls must not stall the loop."""

        def write() -> None:
            with contextlib.suppress(OSError):
                self._write(key, pristine)

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            write()
        else:
            loop.run_in_executor(None, write)

    def _read(self, key: str) -> Pristine | None:
        if self.root is None:
            return None
        try:
            raw = (self.root / f"{key}.json.gz").read_bytes()
        except OSError:
            return None
        baseline = None
        with contextlib.suppress(OSError):
            baseline = (self.root / f"{key}.tar").read_bytes()
        try:
            return _decode(raw, baseline)
        except (ValueError, KeyError, TypeError, OSError, EOFError):
            return None

    def _write(self, key: str, pristine: Pristine) -> None:
        assert self.root is not None
        self.root.mkdir(parents=True, exist_ok=True)
        if pristine.baseline is not None:
            if len(pristine.baseline) > MAX_BASELINE_BYTES:
                return
            _atomic_write(self.root / f"{key}.tar", pristine.baseline)
        _atomic_write(self.root / f"{key}.json.gz", _encode(pristine))


def _atomic_write(path: Path, data: bytes) -> None:
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def default_cache() -> PristineCache | None:
    """The process's cache (None when ``ENVFARM_PRISTINE_CACHE=0``)."""
    global _default
    if not current().pristine_cache:
        return None
    if _default is None:
        _default = PristineCache(user_cache_dir() / "pristine")
    return _default


_default: PristineCache | None = None
