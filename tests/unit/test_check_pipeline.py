"""``envfarm check`` is one pipeline: a task whose image is built goes on to its inspection and
its episodes while other tasks still build, and its verdict is given as soon as it is known.

No engine: the fake backend, and a grader that gives 1 to a sandbox where the solution ran.
The proof of overlap is an order of events, not a time: one task's build waits until another
task's verdict is out, which a check with a barrier after its builds would never give.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from envfarm.check.pipeline import (
    CheckConfig,
    CheckEvents,
    CheckReport,
    check_tasks,
    longest_first,
)
from envfarm.check.verdicts import TaskCheck
from envfarm.errors import ImageError
from envfarm.grading.base import Graded, Grader
from envfarm.models.trajectory import Reward, Trajectory
from envfarm.plan.models import SandboxSpec, VerifierPlan
from envfarm.policy.builtin import ORACLE_COMMAND
from envfarm.sandbox.base import PreparedImage, Sandbox
from envfarm.spec.task import Task, load_task
from envfarm.testing.fake_sandbox import FakeBackend

TEST_SH = "#!/usr/bin/env bash\nmkdir -p /logs/verifier\necho 1 > /logs/verifier/reward.txt\n"
NOP_PASSES = "nop passes"


def make_task(root: Path, mode: str = "shared", instruction: str = "Write the answer.") -> Task:
    files = {
        "task.toml": f'[task]\nname = "pipeline/{root.name}"\n[verifier]\n'
        f'environment_mode = "{mode}"\n[environment]\nworkdir = "/app"\n',
        "instruction.md": f"{instruction}\n",
        "environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
        "tests/test.sh": TEST_SH,
        "solution/solve.sh": "#!/usr/bin/env bash\necho 42 > /app/answer.txt\n",
    }
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return load_task(root)


class SolvedGrader(Grader):
    """1 where the oracle's solution ran in the graded sandbox (a clean room never has it),
    else 0; 1 always for a task whose instruction says its nop passes."""

    async def grade(self, sandbox: Sandbox, plan: VerifierPlan) -> Graded:
        solved = ORACLE_COMMAND in getattr(sandbox, "commands", [])
        value = 1.0 if solved or NOP_PASSES in plan.instruction else 0.0
        return Graded(Reward(value=value, valid=True, reason="test"))


class GatedBackend(FakeBackend):
    """A build of a task in ``gates`` ends only once its gate opens; one in ``broken`` fails."""

    def __init__(self, gates: dict[str, asyncio.Event], broken: set[str]) -> None:
        super().__init__()
        self.gates, self.broken = gates, broken

    async def prepare(self, spec: SandboxSpec) -> PreparedImage:
        if spec.task_id in self.gates:
            await self.gates[spec.task_id].wait()
        if spec.task_id in self.broken:
            raise ImageError("the build failed: RUN exit 3")
        return await super().prepare(spec)


class Recorder:
    """The check's events in the order they came."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []
        self.progress: dict[str, tuple[int, int]] = {}
        self.verdicts: list[TaskCheck] = []
        self.episodes: list[tuple[str, Trajectory]] = []

    def events(self, on_verdict: dict[str, asyncio.Event]) -> CheckEvents:
        def verdict(check: TaskCheck) -> None:
            self.log.append(("verdict", check.task_id))
            self.verdicts.append(check)
            if check.task_id in on_verdict:
                on_verdict[check.task_id].set()

        def episode(stage: str, trajectory: Trajectory) -> None:
            self.log.append((stage, trajectory.task_id))
            self.episodes.append((stage, trajectory))

        def progress(stage: str, done: int, total: int) -> None:
            self.progress[stage] = (done, total)

        return CheckEvents(
            on_progress=progress,
            on_image=lambda task, image, error: self.log.append(("image", task.id)),
            on_episode=episode,
            on_verdict=verdict,
        )


def check(
    tasks: list[Task], backend: FakeBackend, config: CheckConfig, events: CheckEvents
) -> CheckReport:
    run = check_tasks(tasks, [], backend, SolvedGrader(), config, events)
    return asyncio.run(asyncio.wait_for(run, 60))  # a barrier would wait here forever


def test_a_task_is_inspected_run_and_judged_while_another_still_builds(tmp_path: Path) -> None:
    sound = make_task(tmp_path / "sound")
    nop = make_task(tmp_path / "nop", instruction=f"Anything: the {NOP_PASSES}.")
    broken = make_task(tmp_path / "broken")
    recorder = Recorder()
    sound_judged = asyncio.Event()
    backend = GatedBackend({nop.id: sound_judged, broken.id: sound_judged}, {broken.id})
    config = CheckConfig(runs=2, concurrency=2)
    report = check([sound, nop, broken], backend, config, recorder.events({sound.id: sound_judged}))

    log = recorder.log
    # the sound task's every stage ended while the others were still building
    sound_done = log.index(("verdict", sound.id))
    assert log[:sound_done].count(("oracle", sound.id)) == 2
    assert ("nop", sound.id) in log[:sound_done]
    assert log.index(("image", nop.id)) > sound_done
    assert log.index(("image", broken.id)) > sound_done
    # one verdict per task, each as soon as it is known
    assert sorted(c.task_id for c in recorder.verdicts) == sorted([sound.id, nop.id, broken.id])
    # every stage counted to its end; a failed build takes its task out of the later stages
    assert recorder.progress == {
        "build": (3, 3),
        "image": (2, 2),
        "oracle": (4, 4),
        "nop": (2, 2),
    }
    assert sorted(stage for stage, _ in recorder.episodes) == ["nop", "nop", *["oracle"] * 4]

    # the verdicts are those of the rules, whatever the order the stages ran in
    checks = {c.task_id: c for c in report.checks}
    assert (checks[sound.id].verdict, checks[sound.id].problems) == ("sound", [])
    assert checks[sound.id].oracle_rewards == [1.0, 1.0]
    assert (checks[sound.id].nop_reward, checks[sound.id].flaky) == (0.0, False)
    assert checks[nop.id].verdict == "unsound"
    assert checks[nop.id].problems == [
        "nop passes: doing nothing scores 1, the maximum; the tests do not tell a solved task "
        "from an untouched one"
    ]
    assert checks[broken.id].verdict == "error"
    assert (checks[broken.id].build, checks[broken.id].infra) == (
        "failed",
        ["build: the build failed: RUN exit 3"],
    )
    assert checks[broken.id].oracle_rewards == []
    assert report.exit_code == 2
    assert all(not sandbox.running for sandbox in backend.created)


def test_compare_modes_runs_in_the_pipeline_too(tmp_path: Path) -> None:
    """A mode's variant is a stage of its own, run, counted and judged with the others while
    another task builds. (A fake image has no GNU date, so the clean room cannot grade: its
    reward is invalid, and the shared task's modes disagree.)"""
    shared = make_task(tmp_path / "shared")
    slow = make_task(tmp_path / "slow", mode="clean")
    recorder = Recorder()
    shared_judged = asyncio.Event()
    backend = GatedBackend({slow.id: shared_judged}, set())
    config = CheckConfig(runs=1, concurrency=3, compare_modes=True)
    report = check([shared, slow], backend, config, recorder.events({shared.id: shared_judged}))

    log = recorder.log
    assert ("clean", shared.id) in log[: log.index(("verdict", shared.id))]
    assert log.index(("image", slow.id)) > log.index(("verdict", shared.id))
    assert recorder.progress["clean"] == (1, 1)
    assert recorder.progress["shared"] == (1, 1)
    checks = {c.task_id: c for c in report.checks}
    assert checks[shared.id].mode_rewards == {"shared": 1.0, "clean": None}
    assert checks[shared.id].problems == [
        "verifier modes disagree: the oracle's reward is clean invalid, shared 1"
    ]
    assert checks[slow.id].mode_rewards["shared"] == 1.0


def test_the_tasks_with_services_start_first_and_the_rest_keep_their_order() -> None:
    examples = Path(__file__).resolve().parents[2] / "tasks"
    names = ["word-count-cli", "pg-schema-migration", "fix-lru-cache", "redis-rate-limiter"]
    tasks = [load_task(examples / name) for name in names]
    assert [task.root.name for task in longest_first(tasks)] == [
        "pg-schema-migration",
        "redis-rate-limiter",
        "word-count-cli",
        "fix-lru-cache",
    ]
