"""Sandboxes under gVisor (the ``runsc`` runtime registered with the engine by scripts/setup):
exec, files and users through the channel and the engine path, and whole oracle episodes, per
task and for a whole run; tasks that need the network are refused with a clear error."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envfarm.controller.episode import EpisodeRequest, EpisodeRunner
from envfarm.controller.planning import Planner
from envfarm.controller.policies import PolicySpec, open_policy
from envfarm.errors import EnvironmentUnsupported
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.sandbox.channel.client import Channel
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.labels import LABEL_RUN
from envfarm.sandbox.docker.runtimes import registered_runtimes
from envfarm.sandbox.docker.sandbox import DockerSandbox, DockerSandboxConfig
from envfarm.sandbox.docker.sandboxd import HELPER_PATH, attach_helper, ensure_helper
from envfarm.settings import current
from envfarm.spec.task import Task, load_task
from tests.plans import engine_plan

pytestmark = pytest.mark.asyncio(loop_scope="session")

REPO = Path(__file__).resolve().parents[2]
GVISOR = "runsc"
ENVFARM_RUN = [sys.executable, "-m", "envfarm", "run"]
IS_GVISOR = "dmesg 2>/dev/null | grep -q gVisor && echo 1 || echo 0"
TEST_SH = f"""#!/usr/bin/env bash
mkdir -p /logs/verifier
answer=$(cat /app/answer.txt 2>/dev/null)
cat > /logs/verifier/reward.json <<EOF
{{"reward": $([ "$answer" = 42 ] && echo 1 || echo 0), "verifier_gvisor": $({IS_GVISOR}),
 "agent_gvisor": $(cat /app/gvisor)}}
EOF
"""
SOLVE_SH = f"ls -la /app > /dev/null && echo 42 > /app/answer.txt\n({IS_GVISOR}) > /app/gvisor\n"


def _sandbox(image: str, **overrides: object) -> DockerSandbox:
    config = {"image": image, "runtime": GVISOR, "run_id": "test-gvisor", **overrides}
    return DockerSandbox(DockerSandboxConfig.model_validate(config))


def make_task(root: Path, *, environment: str = "", agent: str = "", compose: str = "") -> Path:
    files = {
        "task.toml": f'[task]\nname = "test/{root.name}"\n[agent]\n{agent}\n[verifier]\n'
        f'environment_mode = "shared"\n[environment]\nworkdir = "/app"\n{environment}\n',
        "instruction.md": "Write 42 into /app/answer.txt.\n",
        "environment/Dockerfile": "FROM debian:bookworm-slim\nRUN mkdir -p /app\nWORKDIR /app\n",
        "tests/test.sh": TEST_SH,
        "solution/solve.sh": SOLVE_SH,
    }
    if compose:
        files["environment/docker-compose.yaml"] = compose
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


async def run_oracle(
    backend: DockerBackend, task: Task, runtime: str | None = None
) -> dict[str, float]:
    planner = Planner(backend, current().with_flags(runtime=runtime))
    image = await backend.prepare((await planner.plan(task)).sandbox)
    async with open_policy(PolicySpec(base_url="oracle")) as policy:
        runner = EpisodeRunner(
            backend=backend,
            policy=policy,
            grader=TestScriptGrader(),
            run_id="test-gvisor",
            planner=planner,
        )
        trajectory = await runner.run(
            EpisodeRequest(task=task, image=image, job_id="j", group_id="g", episode_id="ep")
        )
    assert trajectory.error is None, trajectory.error
    assert trajectory.reward.valid, trajectory.reward
    return trajectory.reward.components


async def test_runsc_is_registered_as_gvisor_without_network() -> None:
    runtime = registered_runtimes()[GVISOR]
    assert runtime.gvisor
    assert not runtime.networked


async def test_channel_exec_files_and_users(base_image: str) -> None:
    async with _sandbox(base_image) as sandbox:
        attrs = docker_client().api.inspect_container(sandbox.container_id)
        assert attrs["HostConfig"]["Runtime"] == GVISOR
        assert (await sandbox.exec(IS_GVISOR)).stdout == "1\n"
        listing = await sandbox.exec("ls -la / >/dev/null && stat -c '%a %U' /tmp")
        assert (listing.exit_code, listing.stdout) == (0, "1777 root\n")
        payload = os.urandom(3 << 20)
        await sandbox.write_file("/data/blob.bin", payload, mode=0o640)
        assert await sandbox.read_file("/data/blob.bin") == payload
        digest = await sandbox.exec("sha256sum /data/blob.bin")
        assert digest.stdout.split()[0] == hashlib.sha256(payload).hexdigest()
        with pytest.raises(PermissionError):
            await sandbox.write_file("/root/planted", b"x", user="nobody")
        await sandbox.write_file("/tmp/mine/notes.txt", b"hi", mode=0o600, user="nobody")
        owner = await sandbox.exec("stat -c '%U %a' /tmp/mine/notes.txt")
        assert owner.stdout == "nobody 600\n"
        nobody = await sandbox.exec("id -u; touch /root/x", user="nobody")
        assert nobody.stdout == "65534\n"
        assert nobody.exit_code != 0
        timed = await sandbox.exec("sleep 300 & sleep 301", timeout=1)
        assert timed.timed_out
        assert (await sandbox.exec("pgrep -c -x sleep || true")).stdout == "0\n"


async def test_engine_path_exec_and_files(base_image: str) -> None:
    async with _sandbox(base_image, channel=False) as sandbox:
        assert sandbox.channel is None
        result = await sandbox.exec("ls / >/dev/null; echo out; echo err >&2; exit 3")
        assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
        await sandbox.write_file("/tmp/deep/f.bin", b"\x00\xff" * 1000)
        assert await sandbox.read_file("/tmp/deep/f.bin") == b"\x00\xff" * 1000
        with pytest.raises(PermissionError):
            await sandbox.write_file("/root/planted", b"x", user="nobody")
        await sandbox.write_file("/tmp/theirs.txt", b"mine", user="nobody")
        assert await sandbox.read_file("/tmp/theirs.txt", user="nobody") == b"mine"
        owner = await sandbox.exec("stat -c %U /tmp/theirs.txt")
        assert owner.stdout == "nobody\n"
        assert (await sandbox.exec("sleep 300", timeout=1)).timed_out


async def test_uploaded_helper_and_compat_library(base_image: str) -> None:
    """The path of an engine that cannot see this machine's files."""
    helper = await ensure_helper()
    container = await asyncio.to_thread(
        docker_client().containers.create,
        base_image,
        command=[HELPER_PATH],
        entrypoint=[],
        init=True,
        stdin_open=True,
        network_mode="none",
        runtime=GVISOR,
        labels={LABEL_RUN: "test-gvisor"},
    )
    try:
        attached = await asyncio.to_thread(
            attach_helper, container, helper, upload=True, gvisor=True
        )
        await asyncio.to_thread(container.start)
        channel = await Channel.connect(attached.sock, "uploaded")
        outcome = await channel.exec("ls -l " + HELPER_PATH)
        assert outcome.exit_code == 0, outcome.stderr
        assert outcome.stdout.startswith(b"-rwxr-xr-x")
        channel.close()
    finally:
        await asyncio.to_thread(container.remove, force=True)


async def test_oracle_episode_of_a_task_that_asks_for_gvisor(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path / "asks-gvisor", environment='runtime = "gvisor"'))
    seen = await run_oracle(DockerBackend(), task)
    assert seen == {"reward": 1.0, "verifier_gvisor": 1.0, "agent_gvisor": 1.0}


async def test_oracle_episode_as_a_non_root_agent_under_gvisor(tmp_path: Path) -> None:
    root = make_task(tmp_path / "gvisor-user", agent='user = "nobody"')
    (root / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nRUN mkdir -p /app && chown nobody /app\nWORKDIR /app\n"
    )
    (root / "solution" / "solve.sh").write_text(
        f"{SOLVE_SH}touch /etc/planted 2>/dev/null; id -u > /app/uid\n"
    )
    (root / "tests" / "test.sh").write_text(
        TEST_SH.replace(
            '"agent_gvisor"',
            '"uid": $(cat /app/uid), "planted": $(test -e /etc/planted && echo 1 || echo 0),'
            ' "agent_gvisor"',
        )
    )
    seen = await run_oracle(DockerBackend(), load_task(root), GVISOR)
    assert seen["uid"] == 65534
    assert seen["planted"] == 0
    assert (seen["reward"], seen["agent_gvisor"]) == (1.0, 1.0)


async def test_tasks_gvisor_cannot_run_are_refused(tmp_path: Path) -> None:
    backend = DockerBackend()
    public = load_task(make_task(tmp_path / "public", agent='network_mode = "public"'))
    with pytest.raises(EnvironmentUnsupported, match=r"--network=none.*'public' in the agent"):
        await engine_plan(backend, public, runtime=GVISOR)
    compose = "services:\n  cache:\n    image: redis:7\n"
    sidecar = load_task(make_task(tmp_path / "sidecar", compose=compose))
    with pytest.raises(EnvironmentUnsupported, match=r"its services \(cache\)"):
        await engine_plan(backend, sidecar, runtime=GVISOR)
    offline = load_task(make_task(tmp_path / "offline"))
    with pytest.raises(EnvironmentUnsupported, match=r"no runtime 'no-such-runtime'.*runsc"):
        await engine_plan(backend, offline, runtime="no-such-runtime")


async def test_cli_runs_a_task_under_gvisor_and_refuses_a_network_task(tmp_path: Path) -> None:
    good = make_task(tmp_path / "tasks" / "offline")
    make_task(tmp_path / "tasks" / "online", environment='network_mode = "public"')
    out = tmp_path / "out"
    run = await asyncio.to_thread(
        subprocess.run,
        [*ENVFARM_RUN, "--runtime", GVISOR, str(good.parent), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=REPO,
        check=False,
    )
    assert run.returncode == 2, run.stdout + run.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert "registered with --network=none" in summary["bad_inputs"]["test/online"]
    assert summary["tasks"]["test/offline"]["mean_reward"] == 1.0
    [line] = (out / "trajectories.jsonl").read_text().splitlines()
    assert json.loads(line)["reward"]["components"]["agent_gvisor"] == 1.0
