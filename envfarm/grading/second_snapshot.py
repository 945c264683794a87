"""The second tamper snapshot, taken when the agent has stopped, and what it shows against the
first (``tamper/inspection.py``): the flags, and the workdir's changed files kept for the diff.

Without collect hooks the snapshot's workspace may come from the clean room's capture instead
of a walk of its own (``derived.py``): ``take(derive=True)`` leaves it out, and ``derive``
completes it from the capture's changes, or takes it in full when the capture cannot stand for
it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from envfarm.grading.cleanroom.carry import Changes
from envfarm.grading.cleanroom.derived import Derived, derivable, derive_workspace
from envfarm.grading.grading_log import GradingLog
from envfarm.grading.starting import StartingState
from envfarm.grading.tamper.inspection import Inspection, inspect_snapshots
from envfarm.grading.tamper.snapshot import Snapshot, take_snapshot
from envfarm.grading.tamper.workspace import export_changed
from envfarm.sandbox.base import Sandbox


@dataclass
class SecondSnapshot:
    sandbox: Sandbox
    start: StartingState
    log: GradingLog
    keep_artifacts: bool
    inspection: Inspection | None = None
    changed_tar: bytes | None = None

    def derives(self) -> bool:
        """Whether the second snapshot's workspace comes from the clean room's capture."""
        if self.start.before is None or self.start.listing is None:
            return False
        return derivable(self.start.before, self.start.listing)

    async def take(self, *, derive: bool = False) -> Snapshot | None:
        if self.start.before is None:
            return None
        with self.log.timed("snapshot_after"):
            after = await take_snapshot(
                self.sandbox, None, before=self.start.before, derive_workspace=derive
            )
        if not after.workspace_derived:
            await self._inspect(after)
        return after

    async def derive(self, partial: Snapshot | None, changes: Changes) -> Snapshot | None:
        """The second snapshot with its workspace from ``changes``; the full one, taken now,
        when the capture cannot stand for it."""
        if partial is None or not partial.workspace_derived:
            return partial
        assert self.start.before is not None
        assert self.start.listing is not None
        with self.log.timed("snapshot_derive"):
            derived = await asyncio.to_thread(
                derive_workspace, self.start.before, partial, self.start.listing, changes
            )
        if derived is None:
            self.log.notes.append(
                "second snapshot taken in full: the capture could not stand for it"
            )
            return await self.take()
        await self._inspect(derived.snapshot, derived)
        return derived.snapshot

    async def _inspect(self, after: Snapshot, derived: Derived | None = None) -> None:
        assert self.start.before is not None
        self.inspection = inspect_snapshots(self.start.before, after)
        if self.keep_artifacts and self.inspection.workspace is not None:
            changed = self.inspection.workspace.changed()
            with self.log.timed("changed_export"):
                if derived is not None:
                    self.changed_tar = await asyncio.to_thread(derived.changed_tar, changed)
                else:
                    self.changed_tar = await export_changed(
                        self.sandbox, self.start.before.workdir, changed
                    )
