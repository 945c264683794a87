"""What a fresh container of an image looks like before any agent, taken once per image.

Before the agent, grading needs three things about the container: the clean room's listing of
its whole file system, the first tamper snapshot, and (for the artifacts) a copy of the
workdir. For a given image and task they are the same in every episode: the container starts
from the image's layers, and envfarm puts the same files into it (the task's solution, its bind
files). So the first episode of an image and task takes them in its own container, as
before, and the later ones reuse them; an episode then reads only its container's clock (the
``since`` of the ctime comparisons after the agent must be its own).

The reused listing keeps only the entries whose ctime is older than the container that was
listed: what the image has, not what envfarm or the image's entrypoint wrote after the start.
An entry missing from it looks new to a later episode, and is carried if it changed in that
episode: the verifier receives what it would have received anyway, at most a file the image
already has. Nothing the agent does can reach the cache: it is written before the agent starts.

The key is the image's id (content-addressed), the task's content hash (its solution, bind
files and compose file), the workdir, what the episode takes (listing, snapshot, copy, the
solution uploaded), and the scripts that take them. Entries live in memory and, compressed,
in ``$XDG_CACHE_HOME/envfarm/pristine/`` so later runs reuse them (``ENVFARM_PRISTINE_CACHE=0``
turns the cache off). Concurrent episodes of one key in a process wait for the first one's.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envfarm.grading.carry import LIST_SCRIPT, Listing
from envfarm.grading.snapshot import SNAPSHOT_SCRIPT, Snapshot
from envfarm.paths import user_cache_dir

VERSION = 1
CTIME_MARGIN_S = 1.0
DISABLE_VARIABLE = "ENVFARM_PRISTINE_CACHE"
MAX_BASELINE_BYTES = 8 * 1024 * 1024
MAX_IN_MEMORY = 256


@dataclass(frozen=True)
class Pristine:
    listing: Listing | None
    """Entries as the image has them; ``now`` is the listed container's (replace it)."""
    snapshot: Snapshot | None
    baseline: bytes | None


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
    parts = [str(VERSION), image_id, task_hash, workdir or "", LIST_SCRIPT, SNAPSHOT_SCRIPT]
    parts += [str(int(flag)) for flag in (listing, snapshot, baseline, solution)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def image_entries(listing: Listing) -> Listing | None:
    """``listing`` with only what the image has (None when the container's start is unknown)."""
    if listing.started is None:
        return None
    cutoff = listing.started - CTIME_MARGIN_S
    entries = {p: e for p, e in listing.entries.items() if e[1] < cutoff}
    return Listing(listing.workdir, listing.now, entries, list(listing.mounts), listing.started)


def _encode(pristine: Pristine) -> bytes:
    data: dict[str, Any] = {"version": VERSION}
    if pristine.listing is not None:
        listing = pristine.listing
        data["listing"] = {
            "workdir": listing.workdir,
            "mounts": listing.mounts,
            "entries": [[p, k, c] for p, (k, c) in listing.entries.items()],
        }
    if pristine.snapshot is not None:
        data["snapshot"] = pristine.snapshot.model_dump(mode="json")
    data["baseline"] = pristine.baseline is not None
    return gzip.compress(json.dumps(data).encode(), compresslevel=1)


def _decode(raw: bytes, baseline: bytes | None) -> Pristine | None:
    data = json.loads(gzip.decompress(raw))
    if data.get("version") != VERSION or bool(data.get("baseline")) != (baseline is not None):
        return None
    listing = None
    if (shown := data.get("listing")) is not None:
        entries = {str(p): (str(k), float(c)) for p, k, c in shown["entries"]}
        listing = Listing(str(shown["workdir"]), 0.0, entries, [str(m) for m in shown["mounts"]])
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

    def settle(self, key: str, pristine: Pristine | None, *, store: bool = True) -> None:
        pending = self._taking.pop(key, None)
        if pending is not None and not pending.done():
            pending.set_result(pristine)
        if pristine is None:
            return
        self._memory[key] = pristine
        while len(self._memory) > MAX_IN_MEMORY:
            del self._memory[next(iter(self._memory))]
        if store and self.root is not None:
            with contextlib.suppress(OSError):
                self._write(key, pristine)

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
    if os.environ.get(DISABLE_VARIABLE, "1") == "0":
        return None
    if _default is None:
        _default = PristineCache(user_cache_dir() / "pristine")
    return _default


_default: PristineCache | None = None
