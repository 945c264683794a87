"""``envfarm check``'s look inside the image, taken in the task's first oracle episode, finds
what the two throwaway sandboxes of ``leaks.inspect_image`` find; where the solution changed
what the look cannot see past (a file outside the working directory, a git directory), it
leaves the search to a pristine sandbox instead of guessing."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfarm.check.leaks import inspect_image
from envfarm.check.oracle_look import OracleLooks
from envfarm.controller.assembly import open_runner
from envfarm.controller.episode import EpisodeRequest
from envfarm.models.jobs import JobPolicy, JobRequest
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.spec.findings import Finding
from envfarm.spec.task import load_task
from tests.plans import sandbox_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")

ANSWER = "the final answer is 42, as computed from every one of the inputs in the data set"
GIT = "git -c user.name=t -c user.email=t@t"
LEAKY = (
    "FROM debian:bookworm-slim\n"
    f"RUN mkdir -p /app /opt/stash && cd /app && git init -q && echo '{ANSWER}' > answer.txt"
    f' && {GIT} add . && {GIT} commit -qm "Record the answer" && echo draft > answer.txt'
    f" && {GIT} commit -qam \"Start over\" && echo '{ANSWER}' > /opt/stash/answer.txt\n"
    "WORKDIR /app\n"
)
CLEAN = "FROM debian:bookworm-slim\nRUN mkdir -p /app\nWORKDIR /app\n"
WRITE = f"echo '{ANSWER}' > /app/answer.txt\n"
TEST_SH = (
    "#!/bin/bash\nmkdir -p /logs/verifier\n"
    f'[ "$(cat /app/answer.txt)" = "{ANSWER}" ] && echo 1 > /logs/verifier/reward.txt'
    " || echo 0 > /logs/verifier/reward.txt\n"
)


def task_dir(root: Path, dockerfile: str, solve: str) -> Path:
    files = {
        "task.toml": f'[task]\nname = "look/{root.name}"\n[environment]\nworkdir = "/app"\n',
        "instruction.md": "Write the final answer into /app/answer.txt.\n",
        "environment/Dockerfile": dockerfile,
        "tests/test.sh": TEST_SH,
        "solution/solve.sh": "#!/bin/bash\nset -e\n" + solve,
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def rules(findings: list[Finding]) -> list[tuple[str, str]]:
    return sorted((f.rule, f.severity) for f in findings)


@pytest.mark.parametrize(
    ("dockerfile", "solve", "decided", "expected"),
    [
        pytest.param(
            LEAKY, WRITE, True, [("solution-in-git", "error"), ("solution-in-image", "error")],
            id="the-answer-in-the-image-and-its-history",
        ),
        pytest.param(
            LEAKY, "mv /opt/stash/answer.txt /app/answer.txt\n", False,
            [("solution-in-git", "error"), ("solution-in-image", "error")],
            id="a-solution-that-moves-the-images-copy",
        ),
        pytest.param(
            LEAKY, WRITE + f"cd /app && {GIT} commit -qam 'Solve'\n", False,
            [("solution-in-git", "error"), ("solution-in-image", "error")],
            id="a-solution-that-commits-its-answer",
        ),
        pytest.param(
            LEAKY, WRITE + "cd /app && git branch solved && git checkout -q solved\n", True,
            [("solution-in-git", "error"), ("solution-in-image", "error")],
            id="a-solution-that-moves-refs-but-adds-no-object",
        ),
        pytest.param(
            CLEAN, WRITE + "cp /app/answer.txt /tmp/copy && mkdir -p /srv/x\n", True, [],
            id="a-clean-image-and-a-solution-that-leaves-copies",
        ),
        pytest.param(
            CLEAN, WRITE + "exit 3\n", True, [("solution-in-image", "warning")],
            id="a-solution-that-fails",
        ),
    ],
)  # fmt: skip
async def test_the_oracles_look_finds_what_the_throwaway_sandboxes_find(
    tmp_path: Path, dockerfile: str, solve: str, decided: bool, expected: list[tuple[str, str]]
) -> None:
    task = load_task(task_dir(tmp_path / "task", dockerfile, solve))
    backend = DockerBackend()
    image = await backend.prepare(sandbox_spec(task))
    looks = OracleLooks()
    request = JobRequest(tasks=[task.id], policy=JobPolicy(base_url="oracle"))
    async with open_runner(request, backend, run_id="test-look", watcher=looks) as runner:
        episode = EpisodeRequest(
            task=task, image=image, job_id="job", group_id="group", episode_id="ep-1"
        )
        trajectory = await runner.run(episode)
    assert trajectory.error is None, trajectory.error
    found = looks.decided(task.id)
    assert (found is not None) == decided
    if found is None:
        found = await looks.complete(task, backend, image, run_id="test-look")
    reference = await inspect_image(backend, task, image, run_id="test-look")
    assert rules(found) == expected
    assert sorted(f.message for f in found) == sorted(f.message for f in reference)
