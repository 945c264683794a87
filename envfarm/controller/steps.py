"""A multi-step task's episode (Harbor's ``[[steps]]``): its steps in order, in one sandbox.

What Harbor 0.26 does, and envfarm with it: the steps run one after the other in the one
environment the episode provisioned; before a step's agent, the step's ``workdir/`` is copied into
the working directory, its ``workdir/setup.sh`` run there and its healthcheck polled; the step's
agent gets the step's instruction; then the step is graded by its own tests (the task's
``tests/`` merged with the step's, in ``/tests``). A step whose reward is below its
``min_reward``, or whose setup or healthcheck fails, ends the steps there; the episode's reward
comes from the rewards of the steps graded, by the task's ``multi_step_reward_strategy``:
``mean`` (the default: the mean of their rewards, each component the mean of its values, a
missing one counting 0) or ``final`` (the last graded step's).

Where envfarm chooses:

- **One session.** The agent is one conversation: each step's instruction arrives as a new user
  message after the previous step's ``submit`` (Harbor's ``resume_trajectory``; its default is a
  fresh agent per step). A trainer gets one trajectory whose turns are split by
  ``trajectory.steps``. Turn and time limits apply per step (the step's ``[agent].timeout_sec``,
  else the task's). The oracle's ``/solution`` holds the current step's solution.
- **Grading a step before the last in the agent's sandbox**, as Harbor's default ``shared``
  verifier does: its side effects stay for the next step as they do under Harbor, and ``/tests``
  and ``/logs/verifier`` are emptied before the next step begins. A clean room cannot serve
  there: it is made from the agent's container once the agent is done, and stops it, while the
  next step must go on in what the step left.
- **The last step is graded as any episode is**: as ``[verifier].environment_mode`` says (the
  clean room by default), with the tamper checks covering the whole episode. The flags found
  then apply to the episode's reward; rubric items judge the last step. Every step's
  ``artifacts`` are collected once, after the last step.
- **A step's verifier that fails** (no reward, a timeout) makes the episode's reward invalid,
  as for any episode: an infrastructure fault is never a step's 0. A step's setup failing is the
  task's fault when it is the first step (the episode is invalid, not retried); later, Harbor's
  rule applies: the steps end there and the graded ones decide.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from envfarm.agent.loop import Agent, AgentLimits, AgentRun
from envfarm.controller.phases import phase
from envfarm.errors import TaskConfigError
from envfarm.grading.base import Grader
from envfarm.grading.verifier.verdict import finish_reward
from envfarm.models.trajectory import AgentOutcome, Reward, StepResult, Trajectory
from envfarm.plan.models import EpisodePlan, VerifierPlan
from envfarm.sandbox.base import Sandbox
from envfarm.sandbox.files import upload_dir
from envfarm.spec.loaded_task import Task
from envfarm.spec.steps import TaskStep

SOLUTION_DIR = "/solution"
STEP_NOT_GRADED = "StepNotGraded"
"""The error type of an episode whose steps ended before the step its reward needs was graded."""
_RESET = "rm -rf /tests /logs/verifier; mkdir -p /logs/verifier"


class StepSetupFailed(Exception):
    """A step's ``setup.sh`` or healthcheck failed (the message says which, and how)."""


@dataclass
class StepSession:
    task: Task
    plan: EpisodePlan
    sandbox: Sandbox
    grader: Grader
    agent: Agent
    trajectory: Trajectory
    needs_solution: bool
    results: list[StepResult] = field(default_factory=list)
    ended_early: bool = False
    """The steps ended before the last one was run (``min_reward``, a failed setup)."""

    @property
    def first_solution(self) -> Path | None:
        """The first step's solution, uploaded with the episode's provisioning (before the
        tamper snapshot, as a single-step task's is) and put back after the last step."""
        return self.task.steps[0].solution_dir

    @property
    def final_plan(self) -> VerifierPlan:
        """How the last step is graded, by the episode's own grading."""
        return step_plan(self.plan.verifier, self.task, self.task.steps[-1], last=True)

    async def run(self, first_suffix: str = "") -> AgentRun:
        """Every step's agent, and the grading of each step but the last (which is left to the
        episode's grading unless the steps ended early); the whole session as one run."""
        run: AgentRun | None = None
        for index, step in enumerate(self.task.steps):
            last = index == len(self.task.steps) - 1
            try:
                await self._prepare(step, first=index == 0)
            except StepSetupFailed as exc:
                if index == 0:
                    raise TaskConfigError(f"step {step.name!r}: {exc}") from exc
                self.results.append(StepResult(name=step.name, reward=Reward(reason=str(exc))))
                self.ended_early = True
                break
            first_turn = len(self.agent.turns)
            limits = self._limits(step)
            if index == 0:
                self.agent.limits = limits
                run = await self.agent.run(step.instruction + first_suffix)
            else:
                run = await self.agent.resume(step.instruction, limits)
            result = StepResult(
                name=step.name,
                first_turn=first_turn if len(self.agent.turns) > first_turn else None,
                last_turn=len(self.agent.turns) - 1 if len(self.agent.turns) > first_turn else None,
                stop_reason=run.outcome.stop_reason,
            )
            self.results.append(result)
            if last:
                break
            with phase(self.trajectory, "grading"):
                result.reward = await self._grade(step)
            if self.trajectory.error is not None:
                break
            if not _meets(result.reward, step.config.min_reward):
                self.ended_early = True
                break
        assert run is not None
        if self.needs_solution and self.first_solution is not None and len(self.results) > 1:
            await upload_dir(self.sandbox, self.first_solution, SOLUTION_DIR)
        run.outcome = AgentOutcome(
            stop_reason=run.outcome.stop_reason,
            turns=len(self.agent.turns),
            malformed_tool_calls=self.agent.malformed,
        )
        return run

    def episode_reward(self, last: Reward | None = None) -> Reward:
        """The episode's reward from its steps' (``last``: the last step's, just graded)."""
        if last is not None and self.results:
            zero_on = self.final_plan.config.zero_on_flags
            self.results[-1].reward = finish_reward(last, [], zero_on)
        return combine(
            [r.reward for r in self.results], self.task.config.multi_step_reward_strategy
        )

    async def _prepare(self, step: TaskStep, *, first: bool) -> None:
        if not first:
            await _checked(self.sandbox, _RESET, "resetting /tests and /logs/verifier")
        if self.needs_solution and step.solution_dir is not None and not first:
            await upload_dir(self.sandbox, step.solution_dir, SOLUTION_DIR)
        workdir = self.plan.agent.workdir or "/"
        user = step.config.agent.user or self.plan.agent.user
        if step.workdir_dir is not None:
            await upload_dir(self.sandbox, step.workdir_dir, workdir, replace=False)
            if (step.workdir_dir / "setup.sh").is_file():
                script = shlex.quote(f"{workdir.rstrip('/')}/setup.sh")
                done = await self.sandbox.exec(
                    f"bash {script}", workdir=workdir, user=user, timeout=600
                )
                if done.exit_code != 0:
                    tail = (done.stderr or done.stdout).strip()[-400:]
                    raise StepSetupFailed(f"workdir/setup.sh exited {done.exit_code}: {tail}")
        if step.config.healthcheck is not None:
            await _healthy(self.sandbox, step)

    async def _grade(self, step: TaskStep) -> Reward:
        plan = step_plan(self.plan.verifier, self.task, step, last=False)
        graded = await self.grader.grade(self.sandbox, plan)
        return finish_reward(graded.reward, [], plan.config.zero_on_flags)

    def _limits(self, step: TaskStep) -> AgentLimits:
        agent = self.plan.agent
        return AgentLimits(
            max_turns=agent.max_turns,
            timeout_s=step.config.agent.timeout_sec or agent.timeout_s,
            command_timeout_s=agent.command_timeout_s,
            context_budget=agent.context_budget,
        )


def step_plan(base: VerifierPlan, task: Task, step: TaskStep, *, last: bool) -> VerifierPlan:
    """The task's verifier plan for ``step``: its tests, the ``[steps.verifier]`` fields it sets
    over the task's (``env`` merged), in the agent's sandbox unless it is the last step."""
    own = step.config.verifier
    update = {name: getattr(own, name) for name in own.model_fields_set - {"environment_mode"}}
    if "env" in update:
        update["env"] = {**base.config.env, **own.env}
    artifacts = list(base.artifacts)
    if last:
        artifacts += [spec for s in task.steps for spec in s.config.artifacts]
    return base.model_copy(
        update={
            "config": base.config.model_copy(update=update),
            "tests_dir": step_tests(task, step),
            "instruction": step.instruction,
            "mode": base.mode if last else "shared",
            "artifacts": artifacts,
        }
    )


def step_tests(task: Task, step: TaskStep) -> Path:
    """One directory with what ``/tests`` holds for ``step``: the task's ``tests/`` with the
    step's over it (merged once per task content, in a private temporary directory)."""
    if len(step.tests_dirs) == 1:
        return step.tests_dirs[0]
    merged = Path(tempfile.gettempdir()) / f"envfarm-steps-{os.getuid()}" / task.content_hash
    target = merged / step.name
    if not target.is_dir():
        merged.mkdir(parents=True, exist_ok=True, mode=0o700)
        staging = Path(tempfile.mkdtemp(dir=merged))
        for source in step.tests_dirs:
            shutil.copytree(source, staging, dirs_exist_ok=True, symlinks=True)
        try:
            staging.rename(target)
        except OSError:  # another episode merged it first
            shutil.rmtree(staging, ignore_errors=True)
    return target


def combine(rewards: list[Reward], strategy: str | None) -> Reward:
    """The episode's reward from its steps' (those graded: a valid reward), Harbor's way."""
    graded = [r for r in rewards if r.valid and r.value is not None]
    if not graded:
        reason = rewards[-1].reason if rewards else "no step was graded"
        return Reward(reason=f"no step was graded: {reason}")
    flags = sorted({flag for r in graded for flag in r.flags})
    if strategy == "final":
        if rewards[-1] is not graded[-1]:
            return Reward(reason=f"the last step was not graded: {rewards[-1].reason}")
        last = graded[-1]
        return last.model_copy(update={"reason": f"the last step's reward ({last.reason})"})
    keys = sorted({key for r in graded for key in r.components})
    components = {k: sum(r.components.get(k, 0.0) for r in graded) / len(graded) for k in keys}
    value = sum(r.value or 0.0 for r in graded) / len(graded)
    shown = ", ".join(f"{r.value:g}" for r in graded)
    return Reward(
        value=value,
        valid=True,
        components=components,
        flags=flags,
        reason=f"mean of {len(graded)} step reward(s): {shown}",
    )


def _meets(reward: Reward, minimum: float | dict[str, float] | None) -> bool:
    if minimum is None:
        return True
    wanted = {"reward": minimum} if isinstance(minimum, float | int) else minimum
    values = {**reward.components, "reward": reward.value if reward.value is not None else 0.0}
    return all(values.get(key, float("-inf")) >= low for key, low in wanted.items())


async def _checked(sandbox: Sandbox, command: str, what: str) -> None:
    done = await sandbox.exec(command, user="root", timeout=120)
    if done.exit_code != 0:
        raise StepSetupFailed(f"{what} failed: {(done.stderr or done.stdout).strip()[-400:]}")


async def _healthy(sandbox: Sandbox, step: TaskStep) -> None:
    """Harbor's step healthcheck: ``retries`` failures in a row after the start period fail."""
    check = step.config.healthcheck
    assert check is not None
    started, failures, output = time.monotonic(), 0, ""
    while True:
        done = await sandbox.exec(check.command, user="root", timeout=check.timeout_sec)
        if done.exit_code == 0:
            return
        output = (done.stderr or done.stdout).strip()[-400:]
        if time.monotonic() - started >= check.start_period_sec:
            failures += 1
        if failures >= check.retries:
            raise StepSetupFailed(
                f"healthcheck {check.command!r} failed {failures} time(s): {output or 'no output'}"
            )
        await asyncio.sleep(check.interval_sec)
