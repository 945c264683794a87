"""The Kubernetes backend on a real cluster: environment pods pulled from the registry, driven
through the kubelet's attach stream as exactly as the Docker channel, a clean-room verifier
beside running services, and ``envfarm run`` grading the example tasks as pods."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envfarm.sandbox.base import verifier_phases
from envfarm.spec.task import Task
from tests.k8s.cluster import Cluster
from tests.k8s.pods import namespace, pod_backend, pod_task, pods_in, pushed
from tests.plans import sandbox_spec

__all__ = ["namespace", "pushed"]  # fixtures

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_exec_through_the_kubelet_is_exact(
    cluster: Cluster, namespace: str, pushed: list[Task]
) -> None:
    spec = sandbox_spec(pod_task("word-count-cli"))
    async with pod_backend(cluster, namespace) as backend:
        sandbox = backend.create(spec, await backend.prepare(spec), run_id="exact")
        async with sandbox:
            payload = os.urandom(3 * 1024 * 1024)
            await sandbox.write_file("/tmp/payload.bin", payload)
            assert await sandbox.read_file("/tmp/payload.bin") == payload
            digest = await sandbox.exec("sha256sum /tmp/payload.bin | cut -c1-64")
            assert digest.stdout.strip() == hashlib.sha256(payload).hexdigest()

            big = await sandbox.exec("seq 1 300000")
            assert big.stdout == "".join(f"{n}\n" for n in range(1, 300001))
            counted = await sandbox.exec("head -c 100000 /dev/urandom | wc -c; exit 3")
            assert (counted.stdout.strip(), counted.exit_code) == ("100000", 3)
            split = await sandbox.exec("echo out; echo err >&2; exit 141")
            assert (split.stdout, split.stderr, split.exit_code) == ("out\n", "err\n", 141)
            slow = await sandbox.exec("echo started; sleep 60", timeout=2)
            assert (slow.timed_out, slow.exit_code, slow.stdout) == (True, None, "started\n")
            assert (await sandbox.exec("echo alive")).stdout == "alive\n"
            # over the pod's memory limit: the kernel takes the command, never the helper (the
            # model's excess is the model's outcome, as on Docker)
            hog = await sandbox.exec("dd if=/dev/zero of=/dev/null bs=2047M count=1")
            assert hog.exit_code not in (0, None)
            assert (await sandbox.exec("echo alive")).stdout == "alive\n"
    assert pods_in(cluster, namespace) == []


async def test_a_clean_verifier_runs_beside_the_running_services(
    cluster: Cluster, namespace: str, pushed: list[Task]
) -> None:
    """The agent's pod keeps its database; the verifier is a fresh main container in it: none
    of the agent's files, none of its processes, the same services at the same names."""
    spec = sandbox_spec(pod_task("pg-schema-migration"))
    assert spec.verifier_mode == "clean"
    listen = (
        "import socket,time; s=socket.socket(); s.bind(('127.0.0.1', 7777)); s.listen(); "
        "time.sleep(600)"
    )
    async with pod_backend(cluster, namespace) as backend:
        agent = backend.create(spec, await backend.prepare(spec), run_id="clean")
        async with agent:
            await agent.write_file("/root/agent-was-here", b"x")
            await agent.exec(f'nohup python3 -c "{listen}" >/dev/null 2>&1 &')
            probe = "python3 -c \"import socket; socket.create_connection(('127.0.0.1', 7777))\""
            waited = f"for i in $(seq 1 100); do {probe} 2>/dev/null && exit 0; sleep 0.1; done"
            assert (await agent.exec(f"{waited}; exit 1")).exit_code == 0
            fresh = await verifier_phases(agent).fresh_verifier(network=False)
            try:
                assert (await fresh.exec("test -e /root/agent-was-here")).exit_code == 1
                assert (await fresh.exec(probe)).exit_code != 0  # the agent's listener is gone
                db = await fresh.exec("getent hosts db && python3 -c 'print(1)'")
                assert db.exit_code == 0, db.stderr
            finally:
                await fresh.stop()
            [pod] = pods_in(cluster, namespace)
            containers = cluster.kubectl(
                "-n", namespace, "get", pod, "-o", "jsonpath={.spec.ephemeralContainers[*].name}"
            )
            assert containers == "envfarm-verifier"
    assert pods_in(cluster, namespace) == []


def _envfarm_run(cluster: Cluster, namespace: str, policy: str, out: Path) -> dict[str, float]:
    env = {
        **os.environ,
        "KUBECONFIG": cluster.kubeconfig,
        "ENVFARM_SANDBOX_BACKEND": "kubernetes",
        "ENVFARM_SANDBOX_NAMESPACE": namespace,
        "ENVFARM_IMAGE_REGISTRY": cluster.registry,
    }
    tasks = [str(pod_task(name).root) for name in ("word-count-cli", "pg-schema-migration")]
    result = subprocess.run(
        [sys.executable, "-m", "envfarm", "run", *tasks, "--policy", policy, "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode in (0, 1), result.stdout + result.stderr
    rewards: dict[str, float] = {}
    for line in (out / "trajectories.jsonl").read_text().splitlines():
        trajectory = json.loads(line)
        assert trajectory["reward"] is not None, trajectory.get("error")
        rewards[trajectory["task_id"]] = trajectory["reward"]["value"]
    return rewards


async def test_envfarm_run_grades_the_example_tasks_as_pods(
    cluster: Cluster, namespace: str, pushed: list[Task], tmp_path: Path
) -> None:
    oracle = _envfarm_run(cluster, namespace, "oracle", tmp_path / "oracle")
    assert oracle == {"envfarm/word-count-cli": 1.0, "envfarm/pg-schema-migration": 1.0}
    nop = _envfarm_run(cluster, namespace, "nop", tmp_path / "nop")
    assert set(nop) == set(oracle)
    assert all(value < 1.0 for value in nop.values())
    assert pods_in(cluster, namespace) == []
