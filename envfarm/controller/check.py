"""``envfarm check``: prove that each task is sound before anyone trains on it.

Per task: static lint (``spec.lint``), build, a look inside the image (``controller.leaks``), the
oracle ``runs`` times and nop once, both through the same ``Job``/``EpisodeRunner`` machinery
as ``envfarm run``. A task is *sound* when lint finds no error, the image holds neither tests
nor answer, every oracle run reaches the maximum reward (``[metadata].max_reward``, else 1.0),
all oracle runs agree (else the grader is flaky, and the spread is shown), and nop stays below
the maximum. An oracle that misses the maximum is explained: the tail of the verifier's
output and where the episode's artifacts are (``explain.py``). ``--no-run`` resolves every base
image as a run would without a registry (``sandbox.baseimages``), pulling nothing.

What counts against the task and what against the machine: a verifier that writes no reward
is the task's fault; a sandbox that dies, an image build that fails, a judge that is down are
infrastructure. Rubric tasks: with a judge, the oracle's *test* reward must reach the maximum and
every item must be judged; without one, the rubric part is reported as unchecked (and a nop
whose tests alone reach the maximum is then no failure, since the rubric would decide).
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from envfarm.controller.explain import explain_oracle, image_findings, network_cause
from envfarm.controller.job import Job, JobEvents
from envfarm.controller.leaks import inspect_image
from envfarm.controller.runners import open_runner
from envfarm.controller.summary import EXIT_BAD_INPUT, EXIT_INFRA, EXIT_OK
from envfarm.controller.verdicts import TaskCheck, judge_nop, judge_oracle
from envfarm.controller.worker import WorkerConfig
from envfarm.errors import EnvfarmError, TaskSpecError
from envfarm.grading.base import Grader
from envfarm.models.jobs import JobPolicy, JobRequest, JudgeRequest
from envfarm.models.trajectory import Trajectory
from envfarm.sandbox.base import PreparedImage, SandboxBackend
from envfarm.sandbox.baseimages import resolve_offline
from envfarm.spec.config import EnvironmentMode
from envfarm.spec.lint import lint_task, max_reward
from envfarm.spec.task import Task


@dataclass(frozen=True)
class CheckConfig:
    runs: int = 3
    """Oracle runs per task; all must agree."""
    concurrency: int = 4
    build_concurrency: int = 2
    run: bool = True
    """False: lint only (no build, no episodes)."""
    judge: JudgeRequest | None = None
    max_retries: int = 2
    compare_modes: bool = False
    """Also run the oracle once in the other of the ``clean`` and ``shared`` verifier modes;
    a reward that differs between them is a problem (the clean room misses the outcome)."""
    artifacts_dir: Path | None = None
    """Where each episode's grading artifacts are kept (None: not kept); an oracle that misses
    the maximum is explained from them."""
    image_exists: Callable[[str], bool] | None = None
    """With ``run`` False: asks the engine whether it holds an image (never pulls)."""


@dataclass
class CheckEvents:
    """Progress callbacks for a shell: ``on_progress(stage, done, total)``; each image when it is
    ready or failed; each episode when it ends (its stage: ``oracle``, ``nop``, ``clean``,
    ``shared``); each task's check as soon as its verdict is known (once per task)."""

    on_progress: Callable[[str, int, int], None] = lambda stage, done, total: None
    on_image: Callable[[Task, PreparedImage | None, EnvfarmError | None], None] = (
        lambda task, image, error: None
    )
    on_episode: Callable[[str, Trajectory], None] = lambda stage, trajectory: None
    on_verdict: Callable[[TaskCheck], None] = lambda check: None


@dataclass
class CheckReport:
    checks: list[TaskCheck] = field(default_factory=list)
    bad_inputs: list[TaskSpecError] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 all sound; 2 some task unsound or unreadable; else 1 (infrastructure)."""
        if self.bad_inputs or not self.checks or any(c.problems for c in self.checks):
            return EXIT_BAD_INPUT
        return EXIT_INFRA if any(c.infra for c in self.checks) else EXIT_OK


class _Counter:
    def __init__(self, events: CheckEvents, stage: str, total: int) -> None:
        self.events, self.stage, self.total, self.done = events, stage, total, 0
        events.on_progress(stage, 0, total)

    def tick(self, *_: object) -> None:
        self.done += 1
        self.events.on_progress(self.stage, self.done, self.total)

    def episode(self, trajectory: Trajectory) -> None:
        self.events.on_episode(self.stage, trajectory)
        self.tick()


@dataclass
class _Judge:
    """Reads each built task's episodes into its verdict, once, as soon as they are all in."""

    checks: dict[str, TaskCheck]
    config: CheckConfig
    events: CheckEvents
    oracle: list[Trajectory] = field(default_factory=list)
    judged: set[str] = field(default_factory=set)

    def nop_done(self, task: Task, nop: list[Trajectory]) -> None:
        if task.id in self.judged:
            return
        self.judged.add(task.id)
        check = self.checks[task.id]
        judged = self.config.judge is not None
        runs = [t for t in self.oracle if t.task_id == task.id]
        judge_oracle(check, runs, judged)
        check.problems += network_cause(task, check, runs)
        judge_nop(check, nop, judged)
        if self.config.artifacts_dir is not None:
            check.notes += explain_oracle(check, runs, self.config.artifacts_dir.parent)
        if not self.config.compare_modes:
            self.events.on_verdict(check)


async def check_tasks(
    tasks: Sequence[Task],
    bad_inputs: Sequence[TaskSpecError],
    backend: SandboxBackend | None,
    grader: Grader,
    config: CheckConfig,
    events: CheckEvents | None = None,
) -> CheckReport:
    """Check every task; ``backend`` may be None only when ``config.run`` is False."""
    events = events or CheckEvents()
    report = CheckReport(bad_inputs=list(bad_inputs))
    checks = {task.id: _static(task, config) for task in tasks}
    report.checks = list(checks.values())
    if not config.run or not tasks:
        for check in report.checks:
            events.on_verdict(check)
        return report
    if backend is None:
        raise ValueError("check_tasks needs a backend to build and run tasks")
    run_id = f"check-{uuid.uuid4().hex[:8]}"
    images = await _build_all(tasks, backend, config, checks, events)
    built = [task for task in tasks if task.id in images]
    await _inspect_all(built, images, backend, config, checks, events, run_id)
    judge = _Judge(checks, config, events)
    judge.oracle = await _episodes("oracle", built, backend, grader, config, events, run_id)
    by_id = {task.id: task for task in built}
    nop = await _episodes(
        "nop",
        built,
        backend,
        grader,
        config,
        events,
        run_id,
        on_final=lambda t: judge.nop_done(by_id[t.task_id], [t]),
    )
    for task in built:  # a task whose nop never ended (its image refused by the job)
        judge.nop_done(task, [t for t in nop if t.task_id == task.id])
    if config.compare_modes:
        await _compare_modes(built, checks, backend, grader, config, events, run_id)
        for task in built:
            events.on_verdict(checks[task.id])
    return report


def in_mode(task: Task, mode: EnvironmentMode) -> Task:
    verifier = task.config.verifier.model_copy(update={"environment_mode": mode})
    return dataclasses.replace(task, config=task.config.model_copy(update={"verifier": verifier}))


async def _compare_modes(
    tasks: Sequence[Task],
    checks: dict[str, TaskCheck],
    backend: SandboxBackend,
    grader: Grader,
    config: CheckConfig,
    events: CheckEvents,
    run_id: str,
) -> None:
    """One more oracle run per task in each of ``clean`` and ``shared`` it is not set to."""
    modes: tuple[EnvironmentMode, ...] = ("clean", "shared")
    for task in tasks:
        check = checks[task.id]
        own = task.config.verifier.environment_mode
        if check.oracle_rewards:
            check.mode_rewards[own] = check.oracle_rewards[0]
    for mode in modes:
        variants = [in_mode(t, mode) for t in tasks if t.config.verifier.environment_mode != mode]
        ran = await _episodes(
            "oracle", variants, backend, grader, config, events, run_id, runs=1, stage=mode
        )
        for trajectory in ran:
            value = trajectory.reward.value if trajectory.reward.valid else None
            checks[trajectory.task_id].mode_rewards[mode] = value
    for check in checks.values():
        seen = check.mode_rewards
        if len(seen) > 1 and len(set(seen.values())) > 1:
            shown = ", ".join(f"{m} {_shown(r)}" for m, r in sorted(seen.items()))
            check.problems.append(f"verifier modes disagree: the oracle's reward is {shown}")


def _shown(reward: float | None) -> str:
    return "invalid" if reward is None else f"{reward:.3g}"


def _static(task: Task, config: CheckConfig) -> TaskCheck:
    rubrics = list(getattr(task.config.verifier, "rubrics", []))
    check = TaskCheck(
        task_id=task.id,
        path=str(task.root),
        max_reward=max_reward(task),
        rubric_items=[item.name for item in rubrics],
        judge="-" if not rubrics else ("judged" if config.judge else "unchecked"),
        ran=config.run,
        zero_on_flags=task.config.verifier.zero_on_flags,
    )
    check.add_findings(lint_task(task))
    if not config.run:
        check.add_findings(image_findings(resolve_offline(task, config.image_exists)))
    return check


async def _build_all(
    tasks: Sequence[Task],
    backend: SandboxBackend,
    config: CheckConfig,
    checks: dict[str, TaskCheck],
    events: CheckEvents,
) -> dict[str, PreparedImage]:
    slots = asyncio.Semaphore(config.build_concurrency)
    counter = _Counter(events, "build", len(tasks))
    images: dict[str, PreparedImage] = {}

    async def build(task: Task) -> None:
        check = checks[task.id]
        async with slots:
            try:
                image = await backend.prepare(task)
            except EnvfarmError as exc:
                check.build = "failed"
                target = check.infra if exc.infrastructure else check.problems
                target.append(f"build: {short_error(str(exc))}")
                events.on_image(task, None, exc)
                events.on_verdict(check)
                return
            finally:
                counter.tick()
        events.on_image(task, image, None)
        images[task.id] = image
        check.build = "cached" if image.cached else f"{image.build_s:.0f}s"
        check.warnings += [f"build: {warning}" for warning in image.warnings]

    await asyncio.gather(*(build(task) for task in tasks))
    return images


async def _inspect_all(
    tasks: Sequence[Task],
    images: dict[str, PreparedImage],
    backend: SandboxBackend,
    config: CheckConfig,
    checks: dict[str, TaskCheck],
    events: CheckEvents,
    run_id: str,
) -> None:
    slots = asyncio.Semaphore(config.concurrency)
    counter = _Counter(events, "image", len(tasks))

    async def inspect(task: Task) -> None:
        check = checks[task.id]
        async with slots:
            try:
                check.add_findings(
                    await inspect_image(backend, task, images[task.id], run_id=run_id)
                )
            except EnvfarmError as exc:
                check.infra.append(f"image inspection: {short_error(str(exc))}")
            finally:
                counter.tick()

    await asyncio.gather(*(inspect(task) for task in tasks))


async def _episodes(
    policy: str,
    tasks: Sequence[Task],
    backend: SandboxBackend,
    grader: Grader,
    config: CheckConfig,
    events: CheckEvents,
    run_id: str,
    *,
    runs: int | None = None,
    stage: str | None = None,
    on_final: Callable[[Trajectory], None] = lambda trajectory: None,
) -> list[Trajectory]:
    if not tasks:
        return []
    runs = runs or (config.runs if policy == "oracle" else 1)
    counter = _Counter(events, stage or policy, len(tasks) * runs)

    def ended(trajectory: Trajectory) -> None:
        counter.episode(trajectory)
        on_final(trajectory)

    request = JobRequest(
        tasks=[task.id for task in tasks],
        policy=JobPolicy(base_url=policy),
        group_size=runs,
        max_retries=config.max_retries,
        judge=config.judge,
        allow_unjudged=True,
    )
    async with open_runner(
        request, backend, run_id=run_id, grader=grader, artifacts_dir=config.artifacts_dir
    ) as runner:
        worker = WorkerConfig(
            concurrency=config.concurrency, build_concurrency=config.build_concurrency
        )
        job = Job(tasks, runner, request, JobEvents(on_episode=ended), worker=worker)
        result = await job.run()
    return result.trajectories


def short_error(text: str, head: int = 2, tail: int = 10) -> str:
    """The first lines of an error (what failed) and its last (a build's error comes last)."""
    lines = text.strip().splitlines()
    if len(lines) <= head + tail:
        return "\n".join(lines)
    return "\n".join([*lines[:head], "...", *lines[-tail:]])
