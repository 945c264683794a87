"""FAIL_TO_PASS / PASS_TO_PASS grading, artifacts and collect hooks on the real engine."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
import pytest_asyncio

from envfarm.sandbox.docker.backend import DockerBackend
from tests.docker.grading_tasks import (
    FIXED_CALC,
    JUNIT,
    TESTS_IN_REPO,
    bash,
    make_task,
    run_episode,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")

FIX = f"cat > /app/calc.py <<'PY'\n{FIXED_CALC}PY"
LISTS = 'fail_to_pass = ["test_calc.py::test_add"]\npass_to_pass = ["test_calc.py::test_mul"]'
ONLY_TESTS = f"cd /app\npython -m pytest /tests --rootdir=/tests -p no:cacheprovider -rA {JUNIT}\n"


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def backend() -> DockerBackend:
    return DockerBackend()


async def test_fail_to_pass_and_pass_to_pass_decide_the_reward(
    backend: DockerBackend, tmp_path: Path
) -> None:
    task = make_task(tmp_path / "lists", test_sh=ONLY_TESTS, verifier=LISTS)
    solved = await run_episode(backend, task, [bash(FIX)], episode_id="ep-solved")
    assert (solved.reward.valid, solved.reward.value) == (True, 1.0), solved.reward
    assert solved.reward.components == {"fail_to_pass": 1.0, "pass_to_pass": 1.0, "reward": 1.0}
    assert solved.reward.reason == "FAIL_TO_PASS 1/1, PASS_TO_PASS 1/1"

    unsolved = await run_episode(backend, task, [], episode_id="ep-unsolved")
    assert (unsolved.reward.valid, unsolved.reward.value) == (True, 0.0)
    assert unsolved.reward.components["fail_to_pass"] == 0.0
    assert "test_calc.py::test_add (failed)" in (unsolved.reward.reason or "")

    regressed = await run_episode(
        backend,
        task,
        [bash(FIX), bash("sed -i 's/a \\* b/a ** b/' /app/calc.py")],
        episode_id="ep-regressed",
    )
    assert (regressed.reward.valid, regressed.reward.value) == (True, 0.0)
    assert regressed.reward.components == {
        "fail_to_pass": 1.0,
        "pass_to_pass": 0.0,
        "reward": 0.0,
    }


async def test_a_suite_that_exits_early_is_not_a_pass(
    backend: DockerBackend, tmp_path: Path
) -> None:
    task = make_task(
        tmp_path / "lists-exit", test_sh=TESTS_IN_REPO, verifier=LISTS + "\nzero_on_flags = []"
    )
    trajectory = await run_episode(
        backend, task, [bash(FIX), bash("printf 'import os\\nos._exit(0)\\n' > /app/conftest.py")]
    )
    reward = trajectory.reward
    assert (reward.valid, reward.value) == (True, 0.0)
    assert "report:missing" in reward.flags
    assert reward.components["verifier_reward"] == 1.0  # test.sh was fooled, the lists were not
    assert "cannot be trusted" in (reward.reason or "")


async def test_a_verifier_that_crashes_is_invalid_not_zero(
    backend: DockerBackend, tmp_path: Path
) -> None:
    task = make_task(tmp_path / "lists-crash", test_sh="exit 3\n", verifier=LISTS)
    trajectory = await run_episode(backend, task, [bash(FIX)])
    assert trajectory.reward.valid is False
    assert trajectory.reward.value is None
    assert trajectory.error is not None
    assert trajectory.error.phase == "grading"
    assert "failed (exit code 3) without writing a test report" in trajectory.error.message


async def test_artifacts_keep_the_verifier_output_reports_diff_and_collected_files(
    backend: DockerBackend, tmp_path: Path
) -> None:
    task = make_task(
        tmp_path / "artifacts",
        top='artifacts = ["/app/out", {source = "/app/calc.py", destination = "final/calc.py"}]',
        verifier='[[verifier.collect]]\ncommand = "cp /app/calc.py /logs/artifacts/snapshot.py"',
    )
    out = tmp_path / "run" / "artifacts"
    trajectory = await run_episode(
        backend,
        task,
        [bash(FIX), bash("mkdir -p /app/out && echo report > /app/out/r.txt && rm /app/tests/*")],
        episode_id="ep-art",
        artifacts_dir=out,
    )
    assert trajectory.reward.value == 1.0
    assert trajectory.artifacts == "artifacts/ep-art"
    root = out / "ep-art"
    episode = json.loads((root / "episode.json").read_text())
    assert episode["task_id"] == task.id
    assert episode["trajectory_id"] == trajectory.trajectory_id
    assert "2 passed" in (root / "verifier" / "test-stdout.txt").read_text()
    assert (root / "verifier" / "reward.txt").read_text().strip() == "1"
    assert json.loads((root / "verifier.json").read_text())["exit_code"] == 0
    [report] = json.loads((root / "reports.json").read_text())
    assert report["name"] == "junit.xml"
    assert {t["status"] for t in report["tests"]} == {"passed"}
    inspection = json.loads((root / "inspection.json").read_text())
    assert inspection["workspace"]["modified"] == ["calc.py"]
    assert inspection["workspace"]["added"] == ["out/r.txt"]
    assert inspection["workspace"]["deleted"] == ["tests/test_visible.py"]
    diff = (root / "workspace" / "diff.patch").read_text()
    assert "-    return a - b\n+    return a + b\n" in diff
    assert "--- a/tests/test_visible.py\n+++ /dev/null\n" in diff
    with tarfile.open(root / "workspace" / "changed.tar") as archive:
        assert sorted(m.name for m in archive if m.isfile()) == ["./calc.py", "./out/r.txt"]
    assert (root / "collected" / "app" / "out" / "r.txt").read_text() == "report\n"
    assert (root / "collected" / "final" / "calc.py").read_text() == FIXED_CALC
    assert (root / "collected" / "logs-artifacts" / "snapshot.py").read_text() == FIXED_CALC
    [hook] = json.loads((root / "collect.json").read_text())
    assert hook["exit_code"] == 0
