"""``envfarm check``: prove that each task is sound before anyone trains on it.

Per task: static lint (``spec.lint``), build, a look inside the image (``controller.leaks``),
the oracle ``runs`` times and nop once, through the same ``Worker``/``EpisodeRunner`` machinery
as ``envfarm run``. It is one pipeline: a task goes on as soon as its own image is built, to its
episodes of every stage at once (``stages``), the first oracle episode taking the look
inside the image (``oracle_look``), and its verdict is given when they have all ended and the
look is complete; the episodes of all tasks and the throwaway sandboxes of a look that could not
decide share ``concurrency`` slots, so no slot idles while a slow task finishes a stage. A task
is *sound* when lint finds no error, the image holds neither tests nor answer, every oracle run
reaches the maximum reward (``[metadata].max_reward``, else 1.0), all oracle runs agree (else
the grader is flaky, and the spread is shown), and nop stays below the maximum. An oracle that
misses the maximum is explained: the tail of the verifier's output and where the episode's
artifacts are (``explain.py``). ``--no-run`` resolves every base image as a run would without a
registry (``sandbox.baseimages``), pulling nothing.

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

from envfarm.check.explain import explain_oracle, image_findings, mode_cause, network_cause
from envfarm.check.oracle_look import OracleLooks
from envfarm.check.stages import RunSettings, Stage, StageSpec, open_stages
from envfarm.check.steps import judge_steps
from envfarm.check.verdicts import TaskCheck, judge_modes, judge_nop, judge_oracle
from envfarm.controller.planning import Planner
from envfarm.controller.summary import EXIT_BAD_INPUT, EXIT_INFRA, EXIT_OK
from envfarm.controller.worker import WorkerConfig
from envfarm.errors import EnvfarmError, TaskSpecError
from envfarm.grading.base import Grader
from envfarm.models.jobs import JudgeRequest
from envfarm.models.trajectory import Trajectory
from envfarm.plan.planner import environment_spec
from envfarm.sandbox.base import PreparedImage, SandboxBackend
from envfarm.sandbox.images.offline import resolve_offline
from envfarm.settings import Settings, current
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
    settings: Settings | None = None
    """What the episodes are planned with (None: the environment's)."""


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
    """One stage's ``on_progress``: its total shrinks by what a failed build keeps from it."""

    def __init__(self, events: CheckEvents, stage: str, total: int) -> None:
        self.events, self.stage, self.total, self.done = events, stage, total, 0
        events.on_progress(stage, 0, total)

    def tick(self) -> None:
        self.done += 1
        self.events.on_progress(self.stage, self.done, self.total)

    def drop(self, count: int) -> None:
        self.total -= count
        self.events.on_progress(self.stage, self.done, self.total)


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
    slots = asyncio.Semaphore(config.concurrency)
    looks = OracleLooks()
    chosen = config.settings if config.settings is not None else current()
    settings = RunSettings(
        backend=backend,
        settings=chosen,
        planner=Planner(backend, chosen),
        grader=grader,
        run_id=f"check-{uuid.uuid4().hex[:8]}",
        slots=slots,
        worker=WorkerConfig(
            concurrency=config.concurrency, build_concurrency=config.build_concurrency
        ),
        max_retries=config.max_retries,
        judge=config.judge,
        artifacts_dir=config.artifacts_dir,
        oracle_watcher=looks,
    )
    specs = _stage_specs(tasks, config)
    pipeline = _Pipeline(checks, config, events, settings, specs, len(tasks), looks)
    async with open_stages(specs, settings, pipeline.episode_ended) as stages:
        await asyncio.gather(*(pipeline.check(task, stages) for task in longest_first(tasks)))
    return report


def longest_first(tasks: Sequence[Task]) -> list[Task]:
    """The tasks with services first (their episodes start databases: the longest), so that
    the last episodes to start are short ones and the slots end together."""
    return sorted(tasks, key=lambda task: task.compose is None or not task.compose.sidecars)


MODES: tuple[EnvironmentMode, ...] = ("clean", "shared")
"""The verifier modes ``--compare-modes`` runs each task's oracle in, besides its own."""


def in_mode(task: Task, mode: EnvironmentMode) -> Task:
    verifier = task.config.verifier.model_copy(update={"environment_mode": mode})
    return dataclasses.replace(task, config=task.config.model_copy(update={"verifier": verifier}))


def episodes_per_task(task: Task, config: CheckConfig) -> int:
    """The episodes ``check_tasks`` runs of ``task`` once its image is built."""
    own = task.config.verifier.environment_mode
    return config.runs + 1 + (sum(own != m for m in MODES) if config.compare_modes else 0)


def _stage_specs(tasks: Sequence[Task], config: CheckConfig) -> list[StageSpec]:
    everyone = {task.id: task for task in tasks}
    specs = [
        StageSpec("oracle", "oracle", config.runs, everyone),
        StageSpec("nop", "nop", 1, everyone),
    ]
    for mode in MODES if config.compare_modes else ():
        variants = {
            t.id: in_mode(t, mode) for t in tasks if t.config.verifier.environment_mode != mode
        }
        if variants:
            specs.append(StageSpec(mode, "oracle", 1, variants))
    return specs


class _Pipeline:
    """Each task on its own way through the stages: its build, then its episodes of every stage
    at once (the first oracle episode looking inside the image, ``looks``), then the look
    completed where it could not decide, then its verdict; the episodes and throwaway sandboxes
    of all tasks share ``config.concurrency`` slots."""

    def __init__(
        self,
        checks: dict[str, TaskCheck],
        config: CheckConfig,
        events: CheckEvents,
        settings: RunSettings,
        specs: Sequence[StageSpec],
        tasks: int,
        looks: OracleLooks,
    ) -> None:
        self.checks, self.config, self.events, self.settings = checks, config, events, settings
        self.looks = looks
        self.builds = asyncio.Semaphore(config.build_concurrency)
        self.counters = {
            "build": _Counter(events, "build", tasks),
            "image": _Counter(events, "image", tasks),
            **{s.name: _Counter(events, s.name, len(s.tasks) * s.runs) for s in specs},
        }

    def episode_ended(self, stage: str, trajectory: Trajectory) -> None:
        self.events.on_episode(stage, trajectory)
        self.counters[stage].tick()

    async def check(self, task: Task, stages: dict[str, Stage]) -> None:
        mine = [stage for stage in stages.values() if task.id in stage.spec.tasks]
        image = await self._build(task)
        if image is None:
            self.counters["image"].drop(1)
            for stage in mine:
                self.counters[stage.spec.name].drop(stage.spec.runs)
            return
        runs = await self._episodes(task, mine)
        await self._inspect(task, image)
        _judge(task, self.checks[task.id], runs, self.config)
        self.events.on_verdict(self.checks[task.id])

    async def _episodes(self, task: Task, stages: list[Stage]) -> dict[str, list[Trajectory]]:
        ran = await asyncio.gather(*(stage.run(task.id) for stage in stages))
        return {stage.spec.name: runs for stage, runs in zip(stages, ran, strict=True)}

    async def _build(self, task: Task) -> PreparedImage | None:
        check = self.checks[task.id]
        async with self.builds:
            try:
                plan = await self.settings.planner.plan(task)
                image = await self.settings.backend.prepare(plan.sandbox)
            except EnvfarmError as exc:
                check.build = "failed"
                target = check.infra if exc.infrastructure else check.problems
                target.append(f"build: {short_error(str(exc))}")
                self.events.on_image(task, None, exc)
                self.events.on_verdict(check)
                return None
            finally:
                self.counters["build"].tick()
        self.events.on_image(task, image, None)
        check.build = "cached" if image.cached else f"{image.build_s:.0f}s"
        check.warnings += [f"build: {warning}" for warning in image.warnings]
        return image

    async def _inspect(self, task: Task, image: PreparedImage) -> None:
        """The look the task's first oracle episode took inside the image, completed in
        throwaway sandboxes where it could not decide (``oracle_look``)."""
        check = self.checks[task.id]
        try:
            found = self.looks.decided(task.id)
            if found is None:
                async with self.settings.slots:
                    found = await self.looks.complete(
                        task, self.settings.backend, image, run_id=self.settings.run_id
                    )
            check.add_findings(found)
        except EnvfarmError as exc:
            check.infra.append(f"image inspection: {short_error(str(exc))}")
        finally:
            self.counters["image"].tick()


def _judge(
    task: Task, check: TaskCheck, runs: dict[str, list[Trajectory]], config: CheckConfig
) -> None:
    """Read the task's episodes, stage by stage, into its check."""
    judged = config.judge is not None
    oracle = runs["oracle"]
    judge_oracle(check, oracle, judged)
    check.problems += network_cause(task, check, oracle)
    judge_nop(check, runs["nop"], judged)
    check.steps, stops = judge_steps(task, oracle, runs["nop"])
    check.notes += stops
    if config.artifacts_dir is not None:
        check.problems += mode_cause(task, check, oracle, config.artifacts_dir.parent)
        check.notes += explain_oracle(check, oracle, config.artifacts_dir.parent)
    if config.compare_modes:
        modes: dict[str, list[Trajectory]] = {m: runs[m] for m in MODES if m in runs}
        judge_modes(check, task.config.verifier.environment_mode, modes)


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
        check.add_findings(
            image_findings(resolve_offline(environment_spec(task), config.image_exists))
        )
    return check


def short_error(text: str, head: int = 2, tail: int = 10) -> str:
    """The first lines of an error (what failed) and its last (a build's error comes last)."""
    lines = text.strip().splitlines()
    if len(lines) <= head + tail:
        return "\n".join(lines)
    return "\n".join([*lines[:head], "...", *lines[-tail:]])
