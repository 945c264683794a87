"""One episode: provision a sandbox, run the agent, grade, tear down, and say what happened.

An episode never raises (but for cancellation): whatever goes wrong becomes the trajectory's
``error`` with the phase it happened in, and the reward stays invalid (``valid=false``, value
null), so an infrastructure fault can never reach a trainer as a reward of 0. Model-side limits
(turns, time, malformed tool calls) are not errors: the episode is graded as it stands.
A request the server rejected twice (``request_rejected``) keeps the turns sampled before it,
though the episode is invalid: they are the evidence of what the server refused.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from envfarm.controller.agent_phase import AgentPhase
from envfarm.controller.episode_request import EpisodeRequest as EpisodeRequest
from envfarm.controller.episode_request import EpisodeWatcher as EpisodeWatcher
from envfarm.controller.episode_request import blank_trajectory
from envfarm.controller.installed_agents import AgentLayers
from envfarm.controller.phases import error_info, phase
from envfarm.controller.planning import Planner, write_plan
from envfarm.controller.policies import ResolvedPolicy
from envfarm.controller.steps import STEP_NOT_GRADED, StepSession
from envfarm.controller.training_data import settle_training_data
from envfarm.grading.base import Grader
from envfarm.grading.rubric.judges import RubricGrading
from envfarm.grading.session import EpisodeGrading
from envfarm.models.trajectory import ErrorInfo, Reward, Trajectory
from envfarm.plan.models import EpisodePlan, JobChoices
from envfarm.policy.base import SamplingParams
from envfarm.sandbox.base import PreparedImage, Sandbox, SandboxBackend, reclaim_processes
from envfarm.sandbox.files import upload_dir
from envfarm.sandbox.fork import Forked, Forking, Forks
from envfarm.sandbox.images.workstation import workstation_images
from envfarm.sandbox.pool import WarmPools

log = logging.getLogger(__name__)
SOLUTION_DIR = "/solution"


@dataclass(frozen=True)
class Provided:
    """An episode's sandbox, whether it is started already, and its pristine image."""

    sandbox: Sandbox
    started: bool
    pristine_image: str | None


@dataclass
class EpisodeRunner:
    backend: SandboxBackend
    policy: ResolvedPolicy
    grader: Grader
    run_id: str
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_turns: int = 50
    command_timeout_s: float = 120.0
    rubrics: RubricGrading = field(default_factory=RubricGrading)
    """Rubric judges (docs/rubrics.md); without a judge, rubric tasks get invalid rewards."""
    artifacts_dir: Path | None = None
    """When set, each episode's grading artifacts go to ``artifacts_dir/<episode_id>/``
    (docs/grading.md); ``trajectory.artifacts`` names the directory."""
    tamper_checks: bool = True
    """Snapshot the sandbox before and after the agent to flag tampering (docs/grading.md)."""
    context_budget: int | None = None
    """Prompt tokens before the agent summarizes and restarts its context; a task's own
    ``[agent].context_budget_tokens`` applies when it is smaller (or this is None)."""
    pools: WarmPools | None = None
    """Started sandboxes kept ready per environment: an episode takes one instead of starting
    its own (each is used once; the pool refills in the background)."""
    agent_layers: AgentLayers | None = None
    """An installed agent (docs/agents.md) instead of the built-in loop; None: the loop."""

    background_teardown: bool = False
    """Remove a finished episode's sandbox after ``run`` has returned its trajectory (off the
    episode's critical path; ``timings.teardown_s`` is then the time ``run`` spent on it, 0);
    ``drain`` waits for those removals. A failed or cancelled episode is torn down at once."""
    watcher: EpisodeWatcher | None = None
    planner: Planner | None = None
    """Each task's plan in this job (``controller/planning.py``); None: one with the
    environment's settings and this runner's turns, timeouts and budget."""
    _retiring: set[asyncio.Task[None]] = field(default_factory=set, init=False, repr=False)
    _forks: Forks | None = field(default=None, init=False, repr=False)
    _cold_reasons: dict[str, str] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.planner is None:
            choices = JobChoices(
                max_turns=self.max_turns,
                context_budget=self.context_budget,
                command_timeout_s=self.command_timeout_s,
            )
            self.planner = Planner(self.backend, job=choices)

    async def drain(self) -> None:
        """Wait until every sandbox handed to the background has been removed, then remove
        the job's warm environments (their copies are gone with their episodes)."""
        while self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)
        if self._forks is not None:
            forks, self._forks = self._forks, None
            await forks.close()
            self._cold_reasons.update(forks.reasons)

    @property
    def cold_reasons(self) -> dict[str, str]:
        """Task id -> why its episodes started cold though their plan forks."""
        pooled = self.pools.forks if self.pools is not None else None
        forks = [f.reasons for f in (pooled, self._forks) if f is not None]
        return self._cold_reasons | {k: v for reasons in forks for k, v in reasons.items()}

    def _retire(self, sandbox: Sandbox, episode_id: str) -> None:
        async def remove() -> None:
            try:
                await sandbox.stop()
            except Exception:
                log.exception("episode %s: its sandbox could not be removed", episode_id)

        task = asyncio.ensure_future(remove())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def run(self, request: EpisodeRequest) -> Trajectory:
        plans: list[EpisodePlan] = []
        try:
            return await self._run(request, plans)
        finally:
            if self.artifacts_dir is not None and plans:
                write_plan(plans[0], request.episode_id, self.artifacts_dir / request.episode_id)

    async def _run(self, request: EpisodeRequest, plans: list[EpisodePlan]) -> Trajectory:
        """``run``, with the episode's plan put in ``plans`` once it is made."""
        started = time.monotonic()
        trajectory = blank_trajectory(request, self.policy.model)
        if request.build_error is not None or request.image is None:
            trajectory.error = error_info(request.build_error, "build")
            trajectory.reward = Reward(reason=f"image build failed: {request.build_error}")
            trajectory.timings.total_s = time.monotonic() - started
            return trajectory
        trajectory.timings.build_s = request.image.build_s
        assert self.planner is not None
        with phase(trajectory, "provision"):  # a task this job's runtime cannot run
            plan = await self.planner.plan(request.task)
        if trajectory.error:
            trajectory.timings.total_s = time.monotonic() - started
            return trajectory
        plans.append(plan)
        trajectory.provenance.realism = plan.sandbox.realism
        if plan.sandbox.realism == "workstation" or self.agent_layers is not None:
            with phase(trajectory, "build"):
                request = replace(request, image=await self._layered(request.image, plan))
            if trajectory.error:
                trajectory.timings.total_s = time.monotonic() - started
                return trajectory
        assert request.image is not None
        provided: Provided | None = None
        with phase(trajectory, "provision"):
            provided = await self._provide(plan, request.image, trajectory)
        if trajectory.error or provided is None:
            trajectory.timings.total_s = time.monotonic() - started
            return trajectory
        sandbox = provided.sandbox
        try:
            await self._phases(request, plan, provided, trajectory)
            settle_training_data(trajectory, self.policy.versions)
        except BaseException:
            with phase(trajectory, "teardown"):
                await sandbox.stop()
            raise
        if self.background_teardown and trajectory.error is None:
            trajectory.timings.teardown_s = 0.0
            self._retire(sandbox, request.episode_id)
        else:
            with phase(trajectory, "teardown"):
                await sandbox.stop()
        trajectory.timings.total_s = time.monotonic() - started
        return trajectory

    async def _layered(self, image: PreparedImage, plan: EpisodePlan) -> PreparedImage:
        """The task's image with the layers the episode adds: the workstation profile's,
        then the installed agent's."""
        if plan.sandbox.realism == "workstation":
            layers = workstation_images(self.backend)
            image = await layers.with_workstation(image, plan.agent.workdir)
        if self.agent_layers is not None:
            image = await self.agent_layers.image(image)
        return image

    async def _provide(self, plan: EpisodePlan, image: PreparedImage, traj: Trajectory) -> Provided:
        """The episode's sandbox: a copy of the group's warm environment when the plan forks
        (``sandbox/fork.py``; cold when there is none), a warm pool's, or a new one."""
        if plan.sandbox.fork and self.pools is None and isinstance(self.backend, Forking):
            if self._forks is None:
                self._forks = Forks(self.backend, self.run_id)
            forked = await self._forks.acquire(plan.sandbox, image)
            if isinstance(forked, Forked):  # a copy, or started cold after all
                traj.provenance.forked_from = forked.parent_id
                traj.provenance.fork_method = forked.method
                return Provided(forked.sandbox, started=True, pristine_image=forked.image_id)
        if self.pools is not None:  # which forks where the plan does (``sandbox/pool.py``)
            got = await self.pools.acquire(plan.sandbox, image)
            traj.provenance.forked_from = got.parent_id
            traj.provenance.fork_method = got.method
            return Provided(got.sandbox, started=True, pristine_image=got.image_id)
        sandbox = self.backend.create(plan.sandbox, image, run_id=self.run_id)
        return Provided(sandbox, started=False, pristine_image=image.image_id)

    async def _phases(
        self, request: EpisodeRequest, plan: EpisodePlan, provided: Provided, traj: Trajectory
    ) -> None:
        task = request.task
        sandbox = provided.sandbox
        agents = AgentPhase(self.policy, self.sampling, self.grader, self.agent_layers)
        steps: StepSession | None = None
        with phase(traj, "provision"):
            steps = agents.steps(request, plan, sandbox, traj)
        if traj.error:
            return
        verifier_plan = steps.final_plan if steps is not None else plan.verifier
        grading = EpisodeGrading(
            verifier_plan,
            sandbox,
            self.grader,
            allow_solution=self.policy.needs_solution,
            keep_artifacts=self.artifacts_dir is not None,
            inspect=self.tamper_checks,
            image_id=provided.pristine_image,
        )
        with phase(traj, "provision"):
            if not provided.started:
                await sandbox.start()
            if self.watcher is not None:
                await self.watcher.before_agent(request, sandbox)
            solution = steps.first_solution if steps is not None else task.solution_dir
            if self.policy.needs_solution and solution is not None:
                await upload_dir(sandbox, solution, SOLUTION_DIR)
            await grading.before_agent()
        if traj.error:
            return
        with phase(traj, "agent"):
            await agents.run(request, plan, sandbox, traj, steps)
        if steps is not None:
            traj.steps = steps.results
        if traj.error:
            return
        if steps is not None and steps.ended_early:
            traj.reward = grading.finish(steps.episode_reward())
            if not traj.reward.valid:
                traj.error = ErrorInfo(
                    type=STEP_NOT_GRADED,
                    message=traj.reward.reason or "no step was graded",
                    phase="grading",
                    infrastructure=False,
                )
            return
        if self.watcher is not None:
            await self.watcher.after_agent(request, sandbox, traj)
        reclaimed = 0
        with phase(traj, "grading"):
            reclaimed = await reclaim_processes(sandbox)  # the agent's fork bomb is its own
            # before a clean room in place restarts the container, which resets the start
            # time its changes are dated against
            evidence = await self.rubrics.evidence(sandbox, verifier_plan, traj)
            await grading.after_agent(traj.turns)
            traj.reward = await grading.grade()
            traj.reward = await self.rubrics.grade(traj.reward, verifier_plan, traj, evidence)
            if steps is not None:
                traj.reward = steps.episode_reward(traj.reward)
        traj.reward = grading.finish(traj.reward)
        if reclaimed:
            traj.reward.flags.append(PROCESSES_RECLAIMED)
        if self.artifacts_dir is not None:
            root = self.artifacts_dir / request.episode_id
            if await grading.save(root, traj, request.image.build_log if request.image else None):
                traj.artifacts = f"{self.artifacts_dir.name}/{request.episode_id}"
        traj.timings.phases = dict(grading.phases)


PROCESSES_RECLAIMED = "excess:processes_reclaimed"
"""The agent left the sandbox out of processes; what it left running was killed before
grading (the reward is still the tests' verdict)."""
