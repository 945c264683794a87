"""What the sandbox held before the agent: the first tamper snapshot, a copy of the workdir for
the diff, and the file system's listing that a clean room's carry is measured against.

They are taken after provisioning, side by side; or, when an earlier episode of the same image
and task took them (``pristine.py``), that episode's are reused with this container's clock;
without the solution (nop), an oracle's episode's will do, with this container's
``/solution``. Reuse never changes an outcome: when the clock cannot be read, they are taken
afresh.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

from envfarm.errors import GradingError
from envfarm.grading.cleanroom.carry import Listing, container_clock, list_workspace
from envfarm.grading.grading_log import GradingLog
from envfarm.grading.pristine import (
    Pristine,
    PristineCache,
    image_entries,
    pristine_key,
    without_solution,
)
from envfarm.grading.tamper.snapshot import Snapshot, solution_state, take_snapshot
from envfarm.grading.tamper.workspace import capture_baseline
from envfarm.plan.models import VerifierPlan
from envfarm.sandbox.base import Sandbox

NO_BASELINE = "no baseline copy of the workdir (too large or unreadable)"


@dataclass
class StartingState:
    plan: VerifierPlan
    sandbox: Sandbox
    log: GradingLog
    allow_solution: bool
    inspect: bool
    """Take the first tamper snapshot."""
    keep_artifacts: bool
    """Also copy the workdir, for the diff kept with the artifacts."""
    image_id: str | None
    pristine: PristineCache | None
    before: Snapshot | None = None
    baseline: bytes | None = None
    listing: Listing | None = None

    async def take(self) -> None:
        cache = self.pristine if self.image_id else None
        key = self._key()
        found = await cache.lookup(key) if cache is not None else None
        if found is not None:
            with self.log.timed("pristine"):
                try:
                    now = await container_clock(self.sandbox)
                except GradingError:
                    now = None  # taken afresh below
                if now is not None:
                    self._reuse(found, now)
                    return
        taken: Pristine | None = None
        try:
            if found is None and cache is not None and not self.allow_solution:
                taken = await self._from_oracle(cache)
                if taken is not None:
                    return
            await asyncio.gather(self._snapshot(), self._list())
            taken = self._taken()
        finally:
            if cache is not None:
                cache.settle(key, taken)

    async def _from_oracle(self, cache: PristineCache) -> Pristine | None:
        """The state an oracle's episode of this image and task took, with this container's
        ``/solution`` and clock; None when there is none."""
        oracle = await cache.peek(self._key(solution=True))
        if oracle is None:
            return None
        with self.log.timed("pristine"):
            state = await solution_state(self.sandbox)
        adapted = without_solution(oracle, state[1]) if state is not None else None
        if state is None or adapted is None:
            return None
        self._reuse(adapted, state[0])
        return adapted

    def _key(self, *, solution: bool | None = None) -> str:
        return pristine_key(
            self.image_id or "",
            self.plan.task_hash,
            self.plan.workdir,
            listing=self.plan.mode == "clean",
            snapshot=self.inspect,
            baseline=self.inspect and self.keep_artifacts,
            solution=self.allow_solution if solution is None else solution,
        )

    def _taken(self) -> Pristine | None:
        listing = image_entries(self.listing) if self.listing is not None else None
        if self.listing is not None and listing is None:
            return None
        return Pristine(listing, self.before, self.baseline)

    def _reuse(self, found: Pristine, now: float) -> None:
        if found.snapshot is not None:
            self.before = found.snapshot.model_copy(update={"now": now})
            self.log.missing_tools(self.before.missing_tools)
        self.baseline = found.baseline
        if self.inspect and self.keep_artifacts and self.baseline is None:
            self.log.notes.append(NO_BASELINE)
        if found.listing is not None:
            self.listing = replace(found.listing, now=now)

    async def _snapshot(self) -> None:
        if not self.inspect:
            return
        with self.log.timed("snapshot_before"):
            self.before = await take_snapshot(self.sandbox, self.plan.workdir)
        self.log.missing_tools(self.before.missing_tools)
        if self.keep_artifacts:
            with self.log.timed("baseline"):
                self.baseline = await capture_baseline(self.sandbox, self.before.workdir)
            if self.baseline is None:
                self.log.notes.append(NO_BASELINE)

    async def _list(self) -> None:
        if self.plan.mode == "clean":
            with self.log.timed("listing"):
                self.listing = await list_workspace(self.sandbox, self.plan.workdir)
