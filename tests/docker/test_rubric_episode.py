"""Rubric-judged episodes on the real engine: a scripted policy, a scripted judge on loopback.

The example task ``tasks/refactor-rubric`` runs end to end (hidden tests, then one judge per
rubric item), through the episode runner and through ``envfarm run`` as a user runs it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from envfarm.controller.episode import EpisodeRequest, EpisodeRunner
from envfarm.controller.policies import ResolvedPolicy
from envfarm.grading.rubric.judge_context import workspace_diff
from envfarm.grading.rubric.judges import RubricGrading, RubricJudge
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.models.trajectory import Trajectory
from envfarm.policy.openai import OpenAIPolicy
from envfarm.policy.server import PolicyServer
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.spec.task import Task, load_task
from envfarm.testing.judges import ScriptedJudge
from envfarm.testing.scripted import ScriptedResponder, Step, tool_call
from tests.plans import sandbox_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")

REPO = Path(__file__).resolve().parents[2]
TASK_DIR = REPO / "tasks" / "refactor-rubric"
REFACTORED = (TASK_DIR / "solution" / "orders.py").read_text()
FAST: dict[str, Any] = {"backoff_base_s": 0.001, "backoff_max_s": 0.01}


def refactoring_steps() -> list[Step]:
    return [
        tool_call("bash", {"command": "wc -l orders.py"}),
        tool_call("write_file", {"path": "/app/orders.py", "content": REFACTORED}),
        tool_call("bash", {"command": "python -c 'import orders; print(orders.format_money(2))'"}),
        tool_call("submit", {}),
    ]


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def backend() -> DockerBackend:
    return DockerBackend()


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def task() -> Task:
    return load_task(TASK_DIR)


@asynccontextmanager
async def served(responder: Any) -> AsyncIterator[tuple[PolicyServer, OpenAIPolicy]]:
    async with PolicyServer(responder) as server:
        client = OpenAIPolicy(server.base_url, "scripted", max_retries=1, **FAST)
        try:
            yield server, client
        finally:
            await client.aclose()


async def run_episode(
    backend: DockerBackend, task: Task, steps: list[Step], rubrics: RubricGrading
) -> Trajectory:
    async with served(ScriptedResponder(steps)) as (_, client):
        policy = ResolvedPolicy(client, "scripted", "scripted", needs_solution=False)
        runner = EpisodeRunner(
            backend=backend,
            policy=policy,
            grader=TestScriptGrader(),
            run_id="test-rubric",
            rubrics=rubrics,
        )
        request = EpisodeRequest(
            task=task,
            image=await backend.prepare(sandbox_spec(task)),
            job_id="j",
            group_id="g",
            episode_id="e",
        )
        return await runner.run(request)


def user_text(request: dict[str, Any]) -> str:
    return str(request["messages"][1]["content"])


async def test_a_refactoring_is_graded_by_tests_and_one_judge_per_item(
    backend: DockerBackend, task: Task
) -> None:
    judge = ScriptedJudge(
        {
            "readability": ["Looks good to me!", '{"score": 9, "reason": "small named helpers"}'],
            "no_duplication": ['```json\n{"score": 0.8, "reason": "one repeat"}\n```'],
        }
    )
    async with served(judge) as (server, client):
        rubrics = RubricGrading(RubricJudge(client, endpoint=server.base_url, model="scripted"))
        trajectory = await run_episode(backend, task, refactoring_steps(), rubrics)
    assert trajectory.error is None, trajectory.error
    reward = trajectory.reward
    assert reward.valid
    assert reward.components["tests:reward"] == 1.0
    assert reward.components["tests_total"] == reward.components["tests_passed"] == 18
    assert reward.components["rubric:readability"] == pytest.approx(0.9)
    assert reward.components["rubric:no_duplication"] == pytest.approx(0.8)
    assert reward.value == pytest.approx((2 * 1.0 + 0.9 + 0.8) / 4)
    assert reward.flags == []
    readability = judge.requests("readability")
    assert len(readability) == 2
    assert "could not be read as a verdict" in readability[1]["messages"][-1]["content"]
    (no_dup,) = judge.requests("no_duplication")
    for request in (readability[0], no_dup):
        shown = user_text(request)
        assert "Files created or changed in the workdir since the sandbox started" in shown
        assert "=== ./orders.py" in shown
        assert "def format_row(label: str, items: int, amount: float) -> str:" in shown
        assert "__pycache__" not in shown
        assert "reference_orders" not in shown
        assert '[turn 0] bash {"command": "wc -l orders.py"} -> exit 0' in shown
        assert "The session ended: submitted after 4 turns." in shown
        assert "Refactor the module into small, clearly named" in shown
    assert "Is duplicated logic gone" not in user_text(readability[0])
    assert "Is the refactored /app/orders.py easy to read" not in user_text(no_dup)
    written = json.loads(trajectory.to_json())
    calls = written["judge_calls"]
    assert [c["item"] for c in calls] == ["readability", "no_duplication"]
    assert [len(c["attempts"]) for c in calls] == [2, 1]
    assert calls[0]["raw_score"] == "9"
    assert calls[0]["endpoint"] == server.base_url


async def test_a_judge_outage_makes_the_episode_reward_invalid(
    backend: DockerBackend, task: Task
) -> None:
    judge = ScriptedJudge({"readability": [], "no_duplication": []})
    async with served(judge) as (server, client):
        await server.close()
        rubrics = RubricGrading(RubricJudge(client, endpoint=server.base_url))
        trajectory = await run_episode(backend, task, refactoring_steps(), rubrics)
    assert not trajectory.reward.valid
    assert trajectory.reward.value is None
    assert trajectory.error is not None
    assert trajectory.error.phase == "grading"
    assert trajectory.error.type == "GradingError"
    assert "the judge endpoint failed" in trajectory.error.message
    assert len(trajectory.judge_calls) == 2
    assert all(call.error and call.score is None for call in trajectory.judge_calls)


async def test_without_a_judge_the_rule_decides(backend: DockerBackend, task: Task) -> None:
    refused = await run_episode(backend, task, refactoring_steps(), RubricGrading())
    assert not refused.reward.valid
    assert refused.reward.value is None
    assert refused.reward.flags == ["rubric:unjudged"]
    assert refused.reward.components["reward"] == 1.0
    allowed = await run_episode(
        backend, task, refactoring_steps(), RubricGrading(allow_unjudged=True)
    )
    assert allowed.reward.valid
    assert allowed.reward.value == 1.0
    assert allowed.reward.flags == ["rubric:unjudged"]
    assert allowed.judge_calls == []


GIT_TASK_DOCKERFILE = """\
FROM python:3.11-slim
RUN mkdir -p /repo /plain && cd /repo \\
 && printf 'one\\ntwo\\n' > kept.txt && echo gone > deleted.txt \\
 && git init -q && git add . \\
 && git -c user.name=t -c user.email=t@t commit -qm base \\
 && echo unchanged > /plain/old.txt
WORKDIR /repo
"""


async def test_workspace_changes_with_and_without_git(
    backend: DockerBackend, tmp_path: Path
) -> None:
    root = tmp_path / "diff-task"
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "task.toml").write_text('[task]\nname = "test/workspace-diff"\n')
    (root / "instruction.md").write_text("Nothing.\n")
    (root / "tests" / "test.sh").write_text("exit 0\n")
    (root / "environment" / "Dockerfile").write_text(GIT_TASK_DOCKERFILE)
    diff_task = load_task(root)
    sandbox = backend.create(
        sandbox_spec(diff_task),
        await backend.prepare(sandbox_spec(diff_task)),
        run_id="test-rubric",
    )
    async with sandbox:
        agent = (
            "printf 'one\\nTWO\\n' > /repo/kept.txt && rm /repo/deleted.txt"
            " && echo fresh > /repo/new.txt"
            " && git -C /repo -c user.name=a -c user.email=a@a commit -qam agent"
            " && echo fresh > /plain/new.txt && printf 'a\\0b' > /plain/blob.bin"
            " && mkdir -p /plain/__pycache__ && echo x > /plain/__pycache__/m.pyc"
            " && touch -d 2001-01-01 /plain/new.txt"
        )
        done = await sandbox.exec(agent)
        assert done.exit_code == 0, done.stderr
        in_git = await workspace_diff(sandbox, None, max_chars=20_000)
        plain = await workspace_diff(sandbox, "/plain", max_chars=20_000)
        capped = await workspace_diff(sandbox, "/plain", max_chars=10)
        missing = await workspace_diff(sandbox, "/nowhere", max_chars=1_000)
    assert "git diff of the workdir against commit" in in_git
    assert "-two\n+TWO" in in_git
    assert "deleted file mode" in in_git
    assert "-gone" in in_git
    assert "Untracked files:\n\n=== new.txt (6 bytes)\nfresh" in in_git
    assert "=== ./new.txt (6 bytes)\nfresh" in plain
    assert "=== ./blob.bin (3 bytes)\n(binary file, not shown)" in plain
    assert "old.txt" not in plain
    assert "__pycache__" not in plain
    assert capped.startswith("Files crea")
    assert "more characters not shown" in capped
    assert missing == "(the workdir /nowhere does not exist)"


async def test_envfarm_run_with_a_judge_flag(tmp_path: Path) -> None:
    judge = ScriptedJudge(
        {"readability": ['{"score": 10, "reason": "x"}'], "no_duplication": ["Score: 1/2"]}
    )
    out = tmp_path / "run"
    async with PolicyServer(judge, api_key="judge-secret") as server:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "envfarm",
            "run",
            str(TASK_DIR),
            "--policy",
            "oracle",
            "--judge",
            server.base_url,
            "--judge-model",
            "my-judge",
            "--out",
            str(out),
            cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "ENVFARM_JUDGE_API_KEY": "judge-secret"},
        )
        _, stderr = await proc.communicate()
    assert proc.returncode == 0, stderr.decode()[-3000:]
    (line,) = (out / "trajectories.jsonl").read_text().splitlines()
    assert "judge-secret" not in line
    trajectory = json.loads(line)
    assert trajectory["reward"]["value"] == pytest.approx((2 * 1.0 + 1.0 + 0.5) / 4)
    assert [c["model"] for c in trajectory["judge_calls"]] == ["my-judge", "my-judge"]
    assert judge.requests("readability")[0]["model"] == "my-judge"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mean_reward"] == pytest.approx(0.875)


async def test_envfarm_run_refuses_rubric_tasks_for_a_model_without_a_judge(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "envfarm",
        "run",
        str(TASK_DIR),
        "--policy",
        "http://127.0.0.1:9/v1",
        "--out",
        str(tmp_path / "run"),
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await proc.communicate()
    said = (stdout + stderr).decode()
    assert proc.returncode == 2, said
    assert "has rubric items and no --judge was given" in said
    assert "--allow-unjudged" in said
