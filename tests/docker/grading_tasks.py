"""Small pytest tasks for the grading tests, and running one episode of them on the real engine."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from envfarm.controller.episode import EpisodeRequest, EpisodeRunner
from envfarm.controller.planning import Planner
from envfarm.controller.policies import ResolvedPolicy
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.models.trajectory import Trajectory
from envfarm.plan.models import JobChoices
from envfarm.policy.openai import OpenAIPolicy
from envfarm.policy.server import PolicyServer
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.settings import current
from envfarm.spec.task import Task, load_task
from envfarm.testing.scripted import ScriptedResponder, Step, tool_call

# pytest first, so the layer is shared by every task built from this file
DOCKERFILE = """FROM python:3.11-slim
RUN pip install --no-cache-dir pytest==8.3.5
WORKDIR /app
COPY app/ /app/
{extra}RUN chmod -R a+rwX /app
"""
GIT_HISTORY = (
    "RUN cd /app && git init -q -b main && git -c user.name=t -c user.email=t@t add -A "
    "&& git -c user.name=t -c user.email=t@t commit -qm base && git checkout -qb fix "
    "&& sed -i 's/a - b/a + b/' calc.py "
    "&& git -c user.name=t -c user.email=t@t commit -qam fix && git checkout -q main\n"
)
CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
FIXED_CALC = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
VISIBLE_TEST = "from calc import mul\n\n\ndef test_mul_visible():\n    assert mul(2, 2) == 4\n"
HIDDEN_TEST = (
    "from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_mul():\n    assert mul(2, 3) == 6\n"
)
JUNIT = "--junitxml=/logs/verifier/junit.xml"
REWARD_FROM_STATUS = """status=$?
echo $status > /logs/verifier/test-exit-code.txt
if [ $status -eq 0 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""
# the hidden tests run from /tests, with /tests as rootdir: a conftest.py in /app is not loaded
TESTS_IN_PLACE = (
    f"cd /app\npython -m pytest /tests --rootdir=/tests -p no:cacheprovider -rA {JUNIT}\n"
    + REWARD_FROM_STATUS
)
# the hidden tests are copied into the repo and run there: the repo's conftest.py applies
TESTS_IN_REPO = (
    "cp /tests/test_calc.py /app/test_hidden_calc.py\ncd /app\n"
    f"python -m pytest test_hidden_calc.py -p no:cacheprovider -rA {JUNIT}\n" + REWARD_FROM_STATUS
)
# a plain script runner that writes its own JUnit report at the end (declare it: test.sh
# does not name it)
CHECK_PY = """import sys
from calc import add, mul
cases = [("test_add", add(2, 3) == 5), ("test_mul", mul(2, 3) == 6)]
failure = '<failure message="x"/>'
rows = "".join(
    f'<testcase classname="check" name="{n}">{"" if ok else failure}</testcase>' for n, ok in cases
)
with open("/logs/verifier/junit.xml", "w") as out:
    out.write(f'<testsuite tests="{len(cases)}">{rows}</testsuite>')
sys.exit(0 if all(ok for _, ok in cases) else 1)
"""
TESTS_BY_SCRIPT = (
    "cd /app\nif PYTHONPATH=/app python /tests/check.py; then echo 1 > /logs/verifier/reward.txt; "
    "else echo 0 > /logs/verifier/reward.txt; fi\n"
)


def make_task(
    root: Path,
    *,
    test_sh: str = TESTS_IN_PLACE,
    verifier: str = "",
    top: str = "",
    git_history: bool = False,
) -> Task:
    """A task whose ``calc.add`` is broken; ``solution/solve.sh`` fixes it."""
    app = root / "environment" / "app"
    (app / "tests").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "solution").mkdir()
    (root / "task.toml").write_text(
        f'{top}\n[task]\nname = "grading/{root.name}"\n[verifier]\ntimeout_sec = 120\n{verifier}\n'
        '[environment]\nworkdir = "/app"\nmemory_mb = 1024\n'
    )
    (root / "instruction.md").write_text("Fix calc.add in /app/calc.py.\n")
    (root / "environment" / "Dockerfile").write_text(
        DOCKERFILE.format(extra=GIT_HISTORY if git_history else "")
    )
    (app / "calc.py").write_text(CALC)
    (app / "tests" / "test_visible.py").write_text(VISIBLE_TEST)
    (root / "tests" / "test.sh").write_text("#!/bin/bash\nmkdir -p /logs/verifier\n" + test_sh)
    (root / "tests" / "test_calc.py").write_text(HIDDEN_TEST)
    (root / "tests" / "check.py").write_text(CHECK_PY)
    (root / "solution" / "solve.sh").write_text(f"cat > /app/calc.py <<'PY'\n{FIXED_CALC}PY\n")
    return load_task(root)


def bash(command: str) -> Step:
    return tool_call("bash", {"command": command})


SUBMIT = tool_call("submit", {})


@asynccontextmanager
async def scripted(steps: Sequence[Step]) -> AsyncIterator[ResolvedPolicy]:
    async with PolicyServer(ScriptedResponder(steps)) as server:
        client = OpenAIPolicy(server.base_url, "scripted", max_retries=1, backoff_base_s=0.01)
        try:
            yield ResolvedPolicy(client, "scripted", "scripted", needs_solution=False)
        finally:
            await client.aclose()


async def run_episode(
    backend: DockerBackend,
    task: Task,
    steps: Sequence[Step],
    *,
    episode_id: str = "ep-grading",
    settings: dict[str, Any] | None = None,
    job: JobChoices | None = None,
    **runner_args: Any,
) -> Trajectory:
    """``settings``: over the environment's, for the episode's plan; ``job``: the job's
    choices (a group of two forks a task with a healthcheck)."""
    planner = Planner(backend, current().with_flags(**(settings or {})), job)
    image = await backend.prepare((await planner.plan(task)).sandbox)
    async with scripted([*steps, SUBMIT]) as policy:
        runner = EpisodeRunner(
            backend=backend,
            policy=policy,
            grader=TestScriptGrader(),
            run_id="test-grading",
            planner=planner,
            **runner_args,
        )
        request = EpisodeRequest(
            task=task, image=image, job_id="job-g", group_id="grp-g", episode_id=episode_id
        )
        try:
            return await runner.run(request)
        finally:
            await runner.drain()  # a warm environment it forked from is removed
