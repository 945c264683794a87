"""Tasks written as public Harbor tasks are, on the real engine: the compose fixture passes with
the oracle, limits above the machine's are clamped, and a configuration the engine refuses is
bad input that is not retried."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from pathlib import Path

import pytest

from envfarm.check.pipeline import CheckConfig, check_tasks
from envfarm.errors import TaskConfigError
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.limits import engine_capacity
from envfarm.sandbox.docker.sandbox import DockerSandbox, DockerSandboxConfig
from envfarm.spec import load_task
from tests.plans import sandbox_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "harbor-compose"


async def test_harbor_compose_task_is_sound_with_the_oracle(tmp_path: Path) -> None:
    task = load_task(FIXTURE)
    assert task.main_command is None  # Harbor's idle command is the default
    assert task.compose is not None
    assert task.compose.services["store"].aliases == ["kv-store"]
    config = CheckConfig(runs=1, concurrency=2, artifacts_dir=tmp_path / "artifacts")
    report = await check_tasks([task], [], DockerBackend(), TestScriptGrader(), config)
    (check,) = report.checks
    assert check.problems == [], check.notes
    assert check.infra == []
    assert check.oracle_rewards == [1.0]
    assert check.nop_reward == 0.0
    assert check.verdict == "sound"
    assert any("agent.timeout" in w for w in check.warnings)


async def test_a_failing_oracle_is_explained_by_the_verifiers_output(tmp_path: Path) -> None:
    root = tmp_path / "broken"
    shutil.copytree(FIXTURE, root)
    (root / "task.toml").write_text('[task]\nname = "fixtures/broken-oracle"\n')
    (root / "solution" / "solve.sh").write_text(
        "#!/usr/bin/env bash\nresp kv-store SET answer 41\n"
    )
    config = CheckConfig(runs=1, artifacts_dir=tmp_path / "artifacts")
    report = await check_tasks([load_task(root)], [], DockerBackend(), TestScriptGrader(), config)
    (check,) = report.checks
    assert any(p.startswith("oracle fails") for p in check.problems), check.problems
    assert any(n.startswith("oracle ") and str(tmp_path / "artifacts") in n for n in check.notes)
    assert "  | store answered: 41" in check.notes


def _task(root: Path, test_sh: str) -> Path:
    files = {
        "task.toml": f'[task]\nname = "fixtures/{root.name}"\n[environment]\nworkdir = "/app"\n',
        "instruction.md": "Write 42 into /app/answer.txt.\n",
        "environment/Dockerfile": "FROM debian:bookworm-slim\nRUN mkdir -p /app\nWORKDIR /app\n",
        "tests/test.sh": test_sh,
        "solution/solve.sh": "#!/bin/bash\necho 42 > /app/answer.txt\n",
    }
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


async def test_a_verifier_without_a_reward_keeps_its_output_and_is_quoted_once(
    tmp_path: Path,
) -> None:
    silent = "#!/bin/bash\necho 'collected 3 items'\necho 'E   ImportError: answer'\nexit 1\n"
    task = load_task(_task(tmp_path / "no-reward", silent))
    config = CheckConfig(runs=1, artifacts_dir=tmp_path / "out" / "artifacts")
    report = await check_tasks([task], [], DockerBackend(), TestScriptGrader(), config)
    (check,) = report.checks
    oracle = next(p for p in check.problems if p.startswith("oracle: "))
    assert oracle.endswith("verifier output ends with:\ncollected 3 items\nE   ImportError: answer")
    [where, output] = check.notes
    stdout = Path(output.rsplit(": ", 1)[1])
    assert output.startswith("the verifier's output (2 lines, its end quoted above): ")
    assert where.startswith("oracle ")
    assert str(stdout).startswith(where.rsplit(" ", 1)[1])
    kept = await asyncio.to_thread(stdout.read_text)
    assert kept == "collected 3 items\nE   ImportError: answer\n"
    record = await asyncio.to_thread((stdout.parent.parent / "verifier.json").read_text)
    assert '"exit_code": 1' in record


async def test_a_nop_at_the_maximum_explains_the_oracle_that_fails(tmp_path: Path) -> None:
    inverted = (
        "#!/bin/bash\nif [ -e /app/answer.txt ]; then echo 0; else echo 1; fi"
        " > /logs/verifier/reward.txt\n"
    )
    task = load_task(_task(tmp_path / "inverted", inverted))
    config = CheckConfig(runs=1, artifacts_dir=tmp_path / "out" / "artifacts")
    report = await check_tasks([task], [], DockerBackend(), TestScriptGrader(), config)
    (check,) = report.checks
    assert (check.oracle_rewards, check.nop_reward) == ([0.0], 1.0)
    [problem] = check.problems
    assert problem.startswith("oracle fails: the oracle reaches 0, not the maximum 1")
    assert check.notes[0].startswith(
        "nop: doing nothing scores 1, the maximum, where the oracle scores 0: the tests pass "
        "the untouched task and fail the solved one"
    )


async def test_limits_above_the_engines_are_clamped_with_a_warning(tmp_path: Path) -> None:
    root = tmp_path / "big"
    shutil.copytree(FIXTURE, root)
    (root / "environment" / "docker-compose.yaml").unlink()
    (root / "task.toml").write_text('[task]\nname = "fixtures/big"\n[environment]\ncpus = 512\n')
    task = load_task(root)
    backend = DockerBackend()
    image = await backend.prepare(sandbox_spec(task))
    cpus, _ = engine_capacity()
    assert f"cpus = 512 is more than the {cpus:g} this machine has" in " ".join(image.warnings)
    sandbox = backend.create(sandbox_spec(task), image, run_id=f"test-clamp-{uuid.uuid4().hex[:8]}")
    assert isinstance(sandbox, DockerSandbox)
    async with sandbox:
        host_config = docker_client().api.inspect_container(sandbox.container_id)["HostConfig"]
    assert host_config["NanoCpus"] == int(cpus * 1e9)


async def test_a_configuration_the_engine_refuses_is_not_retryable(base_image: str) -> None:
    cpus, _ = engine_capacity()
    config = DockerSandboxConfig(image=base_image, cpus=cpus * 64, channel=False)
    with pytest.raises(TaskConfigError) as caught:
        async with DockerSandbox(config):
            pass
    assert caught.value.retryable is False
    assert caught.value.infrastructure is False


async def test_a_json_summary_of_the_tasks_own_is_not_a_broken_report(tmp_path: Path) -> None:
    fixture = FIXTURE.parent / "tasks" / "own-json-summary"
    config = CheckConfig(runs=1, artifacts_dir=tmp_path / "artifacts")
    task = load_task(fixture)
    report = await check_tasks([task], [], DockerBackend(), TestScriptGrader(), config)
    (check,) = report.checks
    assert (check.oracle_rewards, check.nop_reward) == ([1.0], 0.0), check.problems
    assert check.verdict == "sound", check.problems
    assert not any("report:" in w for w in check.warnings), check.warnings
