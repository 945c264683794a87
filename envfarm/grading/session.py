"""One episode's grading, around the agent: snapshots, hooks, the verifier, flags and artifacts.

The episode runner calls, in order: ``before_agent`` (after provisioning: the first snapshot,
and the file system's listing for a clean-room verifier, or both as an earlier episode of the
image and task took them, ``pristine.py``), ``after_agent`` (when the agent has
stopped: the second snapshot, the command scan, collect hooks, declared artifacts, the workdir's
changes), ``grade`` (the verifier and its verdict), ``finish`` (flags merged, flag policy
applied: last, after any rubric scores were combined) and ``save`` (artifacts, before
teardown). ``grade`` runs the verifier
where ``[verifier].environment_mode`` says: in the agent's sandbox (``shared``), or in a fresh
one from ``VerifierPhases.fresh_verifier`` that receives the agent's outcome (``clean``,
``separate``: ``cleanroom/receive.py``; of the verifier's own image where the task has one,
``verifier/own_image.py``). Grading alone decides the verifier's container, mode and
network: in shared mode the agent's sandbox switches to the verifier phase's network before
anything of the verifier runs (``after_agent``); a fresh verifier starts with it. Any ``Grader`` is
called the same way; its reward still gets the flags.
"""

from __future__ import annotations

import asyncio
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from envfarm.errors import GradingError
from envfarm.grading.artifacts import Bundle, EpisodeRecord, write_bundle
from envfarm.grading.base import Grader
from envfarm.grading.cleanroom.carry import (
    Changes,
    Listing,
    WorkspaceCarry,
    read_changes,
    settle_carry,
)
from envfarm.grading.cleanroom.inplace import SWEEP_MARGIN_S, InPlace, settle_in_place, walk
from envfarm.grading.cleanroom.leftovers import left_running, stopped_note
from envfarm.grading.cleanroom.receive import (
    apply_copies,
    apply_workspace,
    carried_copies,
    verifier_input,
)
from envfarm.grading.cleanroom.scope import CarryScope
from envfarm.grading.grading_log import GradingLog
from envfarm.grading.pristine import PristineCache, default_cache
from envfarm.grading.second_snapshot import SecondSnapshot
from envfarm.grading.starting import StartingState
from envfarm.grading.tamper.commands import scan_commands
from envfarm.grading.tamper.inspection import Inspection
from envfarm.grading.tamper.snapshot import Snapshot
from envfarm.grading.tamper.workspace import unified_diff
from envfarm.grading.verifier.collect import CopiedPath, HookResult, collect
from envfarm.grading.verifier.own_image import own_image
from envfarm.grading.verifier.service_artifacts import copy_from_services, service_specs
from envfarm.grading.verifier.verdict import (
    VerifierOutput,
    expected_reports,
    finish_reward,
    output_reports,
)
from envfarm.models.trajectory import Reward, Trajectory, Turn
from envfarm.plan.models import VerifierPlan
from envfarm.sandbox.base import (
    InPlaceGrading,
    ProcessLogs,
    Sandbox,
    Swept,
    in_place_grading,
    verifier_phases,
)
from envfarm.spec.config import EnvironmentMode


@dataclass
class EpisodeGrading:
    plan: VerifierPlan
    sandbox: Sandbox
    grader: Grader
    allow_solution: bool = False
    """The oracle runs ``/solution/solve.sh``: naming /solution is then not a hidden read."""
    keep_artifacts: bool = False
    inspect: bool = True
    """Take the tamper snapshots (the command scan always runs)."""
    carry: WorkspaceCarry | None = None
    inspection: Inspection | None = None
    command_flags: list[tuple[str, str]] = field(default_factory=list)
    hooks: list[HookResult] = field(default_factory=list)
    copies: list[CopiedPath] = field(default_factory=list)
    service_copies: list[CopiedPath] = field(default_factory=list)
    """Declared artifacts of sidecars (``service``), carried after the workdir's changes."""
    output: VerifierOutput | None = None
    scored: Reward | None = None
    image_id: str | None = None
    """The id of the sandbox's image: with it, what the container looks like before the agent
    is taken once per image and task (``pristine.py``)."""
    pristine: PristineCache | None = field(default_factory=default_cache)
    in_place: bool = False
    """The clean room is the agent's container, swept or restarted (``inplace.py``)."""
    log: GradingLog = field(default_factory=GradingLog)

    def __post_init__(self) -> None:
        self.start = StartingState(
            self.plan,
            self.sandbox,
            self.log,
            allow_solution=self.allow_solution,
            inspect=self.inspect,
            keep_artifacts=self.keep_artifacts,
            image_id=self.image_id,
            pristine=self.pristine,
        )
        self.second = SecondSnapshot(self.sandbox, self.start, self.log, self.keep_artifacts)

    @property
    def phases(self) -> dict[str, float]:
        """Seconds spent in each part of grading (``Timings.phases``)."""
        return self.log.phases

    @property
    def notes(self) -> list[str]:
        return self.log.notes

    @property
    def before(self) -> Snapshot | None:
        return self.start.before

    @property
    def baseline(self) -> bytes | None:
        return self.start.baseline

    @property
    def listing(self) -> Listing | None:
        return self.start.listing

    @property
    def mode(self) -> EnvironmentMode:
        return self.plan.mode

    @property
    def verifier_network(self) -> bool:
        """The plan's: grading alone acts on it (``envfarm/plan/planner.py`` decides it)."""
        return self.plan.network

    async def before_agent(self) -> None:
        """What the sandbox holds before the agent (``starting.py``)."""
        await self.start.take()

    async def after_agent(self, turns: list[Turn]) -> None:
        """Before the verifier runs: what it writes must not pass for the agent's work.

        A clean-room verifier's container starts now, while the agent's is inspected (it runs
        nothing until the agent's container is stopped). Without collect hooks, the second
        snapshot and the clean room's capture run side by side, and the snapshot's workspace
        comes from the capture's walk (``derived.py``); with hooks, in order (the snapshot
        must not see what the hooks write, and the capture must carry it). A clean room that
        can be the agent's container restarted takes ``_after_agent_in_place`` instead."""
        if self.mode != "shared":
            note = stopped_note(await left_running(self.sandbox))
            self.notes.extend([note] if note else [])
        restartable = self._restartable()
        if restartable is not None:
            await self._after_agent_in_place(turns, restartable)
            return
        if self.mode != "shared" and own_image(self.plan) is None:
            await verifier_phases(self.sandbox).prepare_fresh_verifier(
                network=self.verifier_network
            )
        if self.mode == "shared" and self.verifier_network != self.plan.agent_network:
            await verifier_phases(self.sandbox).enter_verifier_phase(network=self.verifier_network)
        self.command_flags = scan_commands(turns, allow_solution=self.allow_solution)
        changes: Changes | None = None
        keep = self.keep_artifacts or self.mode != "shared"
        if self.plan.config.collect:
            after = await self.second.take()
            with self.log.timed("collect"):
                self.hooks, self.copies = await collect(self.sandbox, self.plan, keep=keep)
            changes = await self._read_changes()
        else:
            derive = self.second.derives()
            after, changes = await asyncio.gather(
                self.second.take(derive=derive), self._read_changes()
            )
            if derive and changes is not None:
                after = await self.second.derive(after, changes)
            with self.log.timed("collect"):
                self.hooks, self.copies = await collect(self.sandbox, self.plan, keep=keep)
        if keep and service_specs(self.plan):
            with self.log.timed("collect"):
                self.service_copies = await copy_from_services(self.sandbox, self.plan)
        if changes is not None:
            await self._plan_carry(changes, after)

    def _restartable(self) -> InPlaceGrading | None:
        if self.mode != "clean" or self.listing is None or self.plan.config.collect:
            return None
        return in_place_grading(self.sandbox)

    async def _after_agent_in_place(self, turns: list[Turn], sandbox: InPlaceGrading) -> None:
        """The agent's processes ended; the second snapshot, the helper's walk and the switch to
        the verifier's network side by side (before the tmpfs mounts, where a reward file may
        have been planted, are emptied, or the restart that empties them when the sweep cannot
        stand for one); then grade in place when nothing needs the image's copy of a file, else
        capture from this container (nothing of the agent's runs there now) for a fresh one."""
        assert self.listing is not None
        self.command_flags = scan_commands(turns, allow_solution=self.allow_solution)
        since = self.listing.now - SWEEP_MARGIN_S
        with self.log.timed("sweep"):
            swept = await sandbox.end_processes(since=since)
        listed: Listing | None = None
        if isinstance(swept, Swept):
            after, listed, _ = await asyncio.gather(
                self.second.take(), self._walk(sandbox), self._enter_verifier_network()
            )
            with self.log.timed("walk"):
                await sandbox.remove_files([], contents=swept.tmpfs)
        else:
            self.notes.append(f"restarted for grading: {swept}")
            after = await self.second.take()
            with self.log.timed("restart"):
                await sandbox.restart_clean(network=self.verifier_network)
        with self.log.timed("collect"):
            self.hooks, self.copies = await collect(
                self.sandbox, self.plan, keep=self.keep_artifacts
            )
        if service_specs(self.plan):  # the verifier receives them, as a fresh one would
            with self.log.timed("collect"):
                self.service_copies = await copy_from_services(self.sandbox, self.plan)
        with self.log.timed("walk"):
            settled = await settle_in_place(sandbox, self.listing, self._scope(after), listed)
        if isinstance(settled, InPlace):
            self.carry, self.in_place = settled.carry, True
            return
        self.notes.append(f"graded in a fresh container: {settled}")
        phases = verifier_phases(self.sandbox)
        await phases.prepare_fresh_verifier(network=self.verifier_network)
        if not self.keep_artifacts:  # the fresh container receives the declared artifacts
            self.copies = (await collect(self.sandbox, self.plan, keep=True))[1]
        changes = await self._read_changes()
        assert changes is not None
        await self._plan_carry(changes, after)

    async def _enter_verifier_network(self) -> None:
        with self.log.timed("network"):
            await verifier_phases(self.sandbox).enter_verifier_phase(network=self.verifier_network)

    async def _walk(self, sandbox: InPlaceGrading) -> Listing:
        assert self.listing is not None
        with self.log.timed("walk"):
            return await walk(sandbox, self.listing)

    async def _plan_carry(self, changes: Changes, after: Snapshot | None) -> None:
        assert self.listing is not None
        with self.log.timed("carry_plan"):
            self.carry = await asyncio.to_thread(
                settle_carry, self.listing, changes, self._scope(after)
            )

    async def _read_changes(self) -> Changes | None:
        if self.listing is None:
            return None
        with self.log.timed("carry"):
            # the agent's container is only killed after this and the artifacts' copies
            tidy = any(spec.sidecar is None for spec in self.plan.artifacts)
            return await read_changes(self.sandbox, self.listing, tidy=tidy)

    def _scope(self, after: Snapshot | None) -> CarryScope:
        assert self.listing is not None
        return CarryScope(
            workdir=self.listing.workdir,
            sites=self.before.sites if self.before else [],
            plugin_files=set(after.section("plugins")) if after else set(),
            mounts=self.listing.mounts,
        )

    async def grade(self) -> Reward:
        if self.mode == "shared" or self.in_place:
            if self.in_place and self.service_copies:
                with self.log.timed("apply"):
                    await apply_copies(self.sandbox, self.service_copies)
            return await self._grade_in(self.sandbox)
        if self.mode == "clean" and self.carry is None:
            raise GradingError("clean-room grading: the workdir was not captured")
        phases = verifier_phases(self.sandbox)
        with self.log.timed("fork"):
            image = own_image(self.plan)
            verifier = await phases.fresh_verifier(network=self.verifier_network, image=image)
        # the fresh verifier is removed with the agent's sandbox, after the result is recorded
        with self.log.timed("apply"):
            if self.carry is not None:
                await apply_workspace(verifier, self.carry)
            await apply_copies(verifier, self._carried())
        return await self._grade_in(verifier)

    def _carried(self) -> list[CopiedPath]:
        workdir = self.carry.workdir if self.carry else None
        shared = verifier_phases(self.sandbox).shared_paths()
        return [*carried_copies(self.mode, self.copies, workdir, shared), *self.service_copies]

    async def _grade_in(self, sandbox: Sandbox) -> Reward:
        try:
            with self.log.timed("verifier"):
                graded = await self.grader.grade(sandbox, self.plan)
        except GradingError as exc:  # no reward: what the verifier left still goes to artifacts
            if isinstance(exc.output, VerifierOutput):
                self._ran(exc.output)
            raise
        self._ran(graded.output)
        self.scored = graded.reward
        return graded.reward

    def _ran(self, output: VerifierOutput | None) -> None:
        self.output = output
        if output is not None:
            self.phases["test_sh"] = output.duration_s

    def observed_flags(self) -> list[tuple[str, str]]:
        inspected = self.second.inspection.flags if self.second.inspection else []
        rejected = self.carry.rejected if self.carry else []
        carried = [("tamper:carry_rejected", f"/{path}: {why}") for path, why in rejected]
        withheld = self.carry.withheld if self.carry else []
        carried += [("tamper:carry_withheld", f"/{path}: {why}") for path, why in withheld]
        return [*inspected, *self.command_flags, *carried]

    def finish(self, reward: Reward) -> Reward:
        zero_on = self.plan.config.zero_on_flags
        return finish_reward(reward, self.observed_flags(), zero_on, self.scored)

    async def save(self, root: Path, trajectory: Trajectory, build_log: str | None) -> bool:
        """Write the artifacts to ``root``; False (and nothing raised) when that failed."""
        inspection = (self.second.inspection or Inspection()).model_copy(
            update={"flags": self.observed_flags()}
        )
        bundle = Bundle(
            record=EpisodeRecord(
                trajectory_id=trajectory.trajectory_id,
                episode_id=trajectory.episode_id,
                attempt=trajectory.attempt,
                task_id=self.plan.task_id,
                task_root=str(self.plan.task_root),
                task_hash=self.plan.task_hash,
                notes=self.notes,
            ),
            verifier=self.output,
            inspection=inspection,
            changed_tar=self.second.changed_tar,
            hooks=self.hooks,
            copies=[*self.copies, *self.service_copies],
            build_log=build_log,
        )
        if isinstance(self.sandbox, ProcessLogs):
            bundle.process_logs = await self.sandbox.process_logs()
        if self.mode != "shared":
            bundle.verifier_input = verifier_input(self.mode, self.carry, self._carried())
        if self.output is not None:
            bundle.reports = output_reports(
                self.output, expected_reports(self.plan), self.plan.config.reports
            )
        started = time.monotonic()
        try:
            if inspection.workspace is not None:
                changes = inspection.workspace
                bundle.diff = await asyncio.to_thread(
                    unified_diff,
                    self.baseline,
                    self.second.changed_tar,
                    changes.added,
                    changes.modified,
                    changes.deleted,
                )
            await asyncio.to_thread(write_bundle, root, bundle)
        except (OSError, tarfile.TarError) as exc:
            self.notes.append(f"artifacts not written: {exc}")
            return False
        finally:
            self.phases["artifacts"] = time.monotonic() - started
        return True
