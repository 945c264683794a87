"""One episode's grading, around the agent: snapshots, hooks, the verifier, flags and artifacts.

The episode runner calls, in order: ``before_agent`` (after provisioning: the first snapshot,
and the workdir's listing for a clean-room verifier), ``after_agent`` (when the agent has
stopped: the second snapshot, the command scan, collect hooks, declared artifacts, the workdir's
changes), ``grade`` (the verifier and its verdict), ``finish`` (flags merged, flag policy
applied: last, after any rubric scores were combined) and ``save`` (artifacts, before
teardown). ``grade`` runs the verifier where ``[verifier].environment_mode`` says: in the
agent's sandbox (``shared``), or in a fresh one from ``VerifierPhases.fork_clean`` that receives
the agent's outcome (``clean``, ``separate``: ``cleanroom.py``). Grading alone decides the
verifier's container, mode and network: in shared mode the agent's sandbox switches to the
verifier phase's network before anything of the verifier runs (``after_agent``); a fork starts
with it. Any ``Grader`` is called the same way; its reward still gets the flags.
"""

from __future__ import annotations

import asyncio
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from envfarm.errors import GradingError
from envfarm.grading.artifacts import Bundle, EpisodeRecord, write_bundle
from envfarm.grading.base import Grader
from envfarm.grading.carry import Listing, WorkspaceCarry, capture_changes, list_workspace
from envfarm.grading.cleanroom import (
    apply_copies,
    apply_workspace,
    carried_copies,
    verifier_input,
)
from envfarm.grading.collect import CopiedPath, HookResult, collect
from envfarm.grading.commands import scan_commands
from envfarm.grading.snapshot import Snapshot, take_snapshot
from envfarm.grading.tamper import Inspection, inspect_snapshots
from envfarm.grading.verdict import (
    VerifierOutput,
    expected_reports,
    finish_reward,
    output_reports,
)
from envfarm.grading.workspace import capture_baseline, export_changed, unified_diff
from envfarm.models.trajectory import Reward, Trajectory, Turn
from envfarm.sandbox.base import ProcessLogs, Sandbox, verifier_phases
from envfarm.spec.config import EnvironmentMode
from envfarm.spec.task import Task


@dataclass
class EpisodeGrading:
    task: Task
    sandbox: Sandbox
    grader: Grader
    allow_solution: bool = False
    """The oracle runs ``/solution/solve.sh``: naming /solution is then not a hidden read."""
    keep_artifacts: bool = False
    inspect: bool = True
    """Take the tamper snapshots (the command scan always runs)."""
    before: Snapshot | None = None
    baseline: bytes | None = None
    listing: Listing | None = None
    carry: WorkspaceCarry | None = None
    inspection: Inspection | None = None
    command_flags: list[tuple[str, str]] = field(default_factory=list)
    hooks: list[HookResult] = field(default_factory=list)
    copies: list[CopiedPath] = field(default_factory=list)
    changed_tar: bytes | None = None
    output: VerifierOutput | None = None
    scored: Reward | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def mode(self) -> EnvironmentMode:
        return self.task.config.verifier.environment_mode

    @property
    def verifier_network(self) -> bool:
        return self.task.config.verifier_network()

    async def before_agent(self) -> None:
        workdir = self.task.config.environment.workdir
        if self.inspect:
            self.before = await take_snapshot(self.sandbox, workdir)
            if self.before.missing_tools:
                missing = ", ".join(self.before.missing_tools)
                self.notes.append(f"snapshot tools missing: {missing}")
            if self.keep_artifacts:
                self.baseline = await capture_baseline(self.sandbox, self.before.workdir)
                if self.baseline is None:
                    self.notes.append("no baseline copy of the workdir (too large or unreadable)")
        if self.mode == "clean":
            self.listing = await list_workspace(self.sandbox, workdir)

    async def after_agent(self, turns: list[Turn]) -> None:
        """Before the verifier runs: what it writes must not pass for the agent's work."""
        if self.mode == "shared" and self.verifier_network != self.task.config.agent_network():
            await verifier_phases(self.sandbox).enter_verifier_phase(network=self.verifier_network)
        self.command_flags = scan_commands(turns, allow_solution=self.allow_solution)
        if self.before is not None:
            after = await take_snapshot(self.sandbox, None, before=self.before)
            self.inspection = inspect_snapshots(self.before, after)
            if self.keep_artifacts and self.inspection.workspace is not None:
                self.changed_tar = await export_changed(
                    self.sandbox, self.before.workdir, self.inspection.workspace.changed()
                )
        keep = self.keep_artifacts or self.mode != "shared"
        self.hooks, self.copies = await collect(self.sandbox, self.task, keep=keep)
        if self.listing is not None:
            self.carry = await capture_changes(self.sandbox, self.listing)

    async def grade(self) -> Reward:
        if self.mode == "shared":
            return await self._grade_in(self.sandbox)
        if self.mode == "clean" and self.carry is None:
            raise GradingError("clean-room grading: the workdir was not captured")
        phases = verifier_phases(self.sandbox)
        verifier = await phases.fork_clean(network=self.verifier_network)
        try:
            if self.carry is not None:
                await apply_workspace(verifier, self.carry)
            workdir = self.carry.workdir if self.carry else None
            await apply_copies(verifier, carried_copies(self.mode, self.copies, workdir))
            return await self._grade_in(verifier)
        finally:
            await verifier.stop()

    async def _grade_in(self, sandbox: Sandbox) -> Reward:
        graded = await self.grader.grade(sandbox, self.task)
        self.output, self.scored = graded.output, graded.reward
        return graded.reward

    def observed_flags(self) -> list[tuple[str, str]]:
        inspected = self.inspection.flags if self.inspection else []
        rejected = self.carry.rejected if self.carry else []
        carried = [("tamper:carry_rejected", f"{path}: {why}") for path, why in rejected]
        return [*inspected, *self.command_flags, *carried]

    def finish(self, reward: Reward) -> Reward:
        zero_on = self.task.config.verifier.zero_on_flags
        return finish_reward(reward, self.observed_flags(), zero_on, self.scored)

    async def save(self, root: Path, trajectory: Trajectory, build_log: str | None) -> bool:
        """Write the artifacts to ``root``; False (and nothing raised) when that failed."""
        inspection = (self.inspection or Inspection()).model_copy(
            update={"flags": self.observed_flags()}
        )
        bundle = Bundle(
            record=EpisodeRecord(
                trajectory_id=trajectory.trajectory_id,
                episode_id=trajectory.episode_id,
                attempt=trajectory.attempt,
                task_id=self.task.id,
                task_root=str(self.task.root),
                task_hash=self.task.content_hash,
                notes=self.notes,
            ),
            verifier=self.output,
            inspection=inspection,
            changed_tar=self.changed_tar,
            hooks=self.hooks,
            copies=self.copies,
            build_log=build_log,
        )
        if isinstance(self.sandbox, ProcessLogs):
            bundle.process_logs = await self.sandbox.process_logs()
        if self.mode != "shared":
            workdir = self.carry.workdir if self.carry else None
            carried = carried_copies(self.mode, self.copies, workdir)
            bundle.verifier_input = verifier_input(self.mode, self.carry, carried)
        if self.output is not None:
            bundle.reports = output_reports(self.output, expected_reports(self.task))
        try:
            if inspection.workspace is not None:
                changes = inspection.workspace
                bundle.diff = await asyncio.to_thread(
                    unified_diff,
                    self.baseline,
                    self.changed_tar,
                    changes.added,
                    changes.modified,
                    changes.deleted,
                )
            await asyncio.to_thread(write_bundle, root, bundle)
        except (OSError, tarfile.TarError) as exc:
            self.notes.append(f"artifacts not written: {exc}")
            return False
        return True
