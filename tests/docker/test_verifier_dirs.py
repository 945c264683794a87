"""What the verifier finds. ``/tests`` and ``/solution`` are ordinary directories the task's
test script may remove, as under Harbor, in every verifier mode, on an engine that limits the
sandbox's disk (the default ``storage_mb`` where the storage driver can: ``storage.py``) as on
one that does not. A clean room that stopped a server the oracle left running says so in
``envfarm check``'s verdict, naming the shared mode and ``--compare-modes``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envfarm.check.pipeline import CheckConfig, check_tasks
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.spec import load_task

pytestmark = pytest.mark.asyncio(loop_scope="session")
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "removes-its-tests"


@pytest.mark.parametrize("mode", ["clean", "shared"])
async def test_a_test_script_may_remove_tests_and_solution(tmp_path: Path, mode: str) -> None:
    root = tmp_path / f"removes-its-tests-{mode}"
    shutil.copytree(FIXTURE, root)
    toml = (root / "task.toml").read_text()
    (root / "task.toml").write_text(
        toml.replace("[verifier]\n", f'[verifier]\nenvironment_mode = "{mode}"\n')
    )
    config = CheckConfig(runs=1, artifacts_dir=tmp_path / "artifacts")
    report = await check_tasks([load_task(root)], [], DockerBackend(), TestScriptGrader(), config)
    (check,) = report.checks
    assert check.infra == [], check.infra
    assert (check.oracle_rewards, check.nop_reward) == ([1.0], 0.0), (check.problems, check.notes)
    assert check.verdict == "sound", check.problems


async def test_a_clean_room_that_stopped_the_oracles_server_says_so(tmp_path: Path) -> None:
    fixture = FIXTURE.parent / "serves-its-answer"
    config = CheckConfig(runs=1, compare_modes=True, artifacts_dir=tmp_path / "artifacts")
    report = await check_tasks(
        [load_task(fixture)], [], DockerBackend(), TestScriptGrader(), config
    )
    (check,) = report.checks
    assert check.infra == [], check.infra
    assert check.mode_rewards == {"clean": 0.0, "shared": 1.0}, check.problems
    (cause,) = [p for p in check.problems if p.startswith("likely cause")]
    assert "http.server 8123" in cause
    assert 'environment_mode = "shared"' in cause
    assert "--compare-modes" in cause
