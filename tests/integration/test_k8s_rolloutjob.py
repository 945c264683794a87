"""A RolloutJob end to end against the in-memory Kubernetes API.

Real: the operator runner and the RolloutJob reconciler, the controller (SQLite store, worker),
the REST API on loopback and the trainer's client, the Kubernetes sandbox backend (pod builder,
pod watch, helper channel over attach streams). Simulated: the API server (``MemoryKubeApi``),
the kubelet, and each pod's main container (an in-process helper over a fake sandbox whose
verifier writes a reward), so no episode does real work.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from envfarm.api import create_app
from envfarm.api.server import ApiServer
from envfarm.cli.operator import tasks_in_archive
from envfarm.client import EnvfarmClient
from envfarm.controller.service import open_controller
from envfarm.controller.worker import WorkerConfig
from envfarm.k8s.api import CONFIG_MAPS, PODS, ROLLOUT_JOBS, SECRETS, KubeObject
from envfarm.operator.rolloutjob import FINALIZER, RolloutJobReconciler
from envfarm.operator.workqueue import Operator, rolloutjob_controller
from envfarm.sandbox.base import ExecResult
from envfarm.sandbox.kubernetes.backend import KubernetesBackend, KubernetesBackendConfig
from envfarm.spec.task import load_task
from envfarm.testing.fake_sandbox import FakeSandbox, ok
from envfarm.testing.k8s.fakeruntime import FakePodRuntime
from envfarm.testing.k8s.kubelet import SimulatedKubelet
from envfarm.testing.k8s.memory import MemoryKubeApi
from tests.fake_tasks import task_archive
from tests.waiting import until

NS = "envfarm-sandboxes"
TOKEN = "test-token"
COMPOSE = """\
services:
  main:
    environment:
      PGHOST: db
  db:
    image: postgres:15
    environment:
      POSTGRES_PASSWORD: pw
    healthcheck:
      test: ["CMD-SHELL", "pg_isready"]
      interval: 1s
      retries: 3
"""


def make_task(root: Path, name: str) -> Path:
    """A compose task (main + a database sidecar) graded in the shared verifier mode (a fake
    sandbox has no files to carry into a clean-room verifier)."""
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "solution").mkdir()
    (root / "task.toml").write_text(
        f'[task]\nname = "{name}"\n[verifier]\nenvironment_mode = "shared"\n'
        '[environment]\nworkdir = "/app"\n'
    )
    (root / "instruction.md").write_text("do it\n")
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "environment" / "docker-compose.yaml").write_text(COMPOSE)
    (root / "tests" / "test.sh").write_text("true\n")
    (root / "solution" / "solve.sh").write_text("true\n")
    return root


@dataclass
class Farm:
    api: MemoryKubeApi
    client: EnvfarmClient
    runtime: FakePodRuntime
    operator: Operator
    gate: asyncio.Event
    """Solutions block until it is set (to catch a job while it runs)."""

    def pods(self) -> list[KubeObject]:
        return self.api.objects(PODS)

    def rolloutjob(self, name: str) -> KubeObject | None:
        found = [j for j in self.api.objects(ROLLOUT_JOBS) if j["metadata"]["name"] == name]
        return found[0] if found else None

    def status(self, name: str) -> KubeObject:
        """The status of RolloutJob ``name``, which must exist."""
        job = self.rolloutjob(name)
        assert job is not None, f"no RolloutJob {name}"
        status: KubeObject = job["status"]
        return status


def grading_sandbox(gate: asyncio.Event) -> Callable[[KubeObject], FakeSandbox]:
    def factory(pod: KubeObject) -> FakeSandbox:
        sandbox = FakeSandbox()

        async def handler(command: str) -> ExecResult:
            if "solve.sh" in command:
                await gate.wait()
            if "/tests/test.sh" in command:
                sandbox.files["/logs/verifier/reward.txt"] = b"1\n"
            return ok()

        sandbox.handler = handler
        return sandbox

    return factory


@asynccontextmanager
async def farm(tmp_path: Path, task_ids: list[str]) -> AsyncIterator[Farm]:
    api = MemoryKubeApi()
    gate = asyncio.Event()
    gate.set()
    runtime = FakePodRuntime(grading_sandbox(gate))
    kubelet = SimulatedKubelet(api, runtime=runtime, probe_period_s=0.01)
    tasks = {t.id: t for t in (load_task(tmp_path / "tasks" / i) for i in task_ids)}
    backend = KubernetesBackend(api, KubernetesBackendConfig(namespace=NS))
    worker = WorkerConfig(concurrency=4, lease_s=0.6, poll_s=0.05)
    database = str(tmp_path / "envfarm.db")
    async with (
        open_controller(database, tasks, backend=backend, worker=worker) as controller,
        ApiServer(create_app(controller, token=TOKEN)) as server,
        EnvfarmClient(server.url, TOKEN, retry_for_s=5.0) as client,
    ):
        reconciler = RolloutJobReconciler(
            api, client, server.url, archive_tasks=tasks_in_archive, poll_s=0.05
        )
        operator = Operator(api, NS, workers=4, retry_delay_s=0.05, resync_s=None)
        operator.add(rolloutjob_controller(reconciler))
        await operator.start()
        try:
            yield Farm(api, client, runtime, operator, gate)
        finally:
            await operator.stop()
    await backend.close()
    await kubelet.stop()
    await api.close()


def rolloutjob(name: str, **spec: object) -> KubeObject:
    return {
        "apiVersion": "envfarm.dev/v1alpha1",
        "kind": "RolloutJob",
        "metadata": {"name": name},
        "spec": {
            "tasks": {"configMap": {"name": "tasks"}},
            "policy": {"baseUrl": "oracle", "apiKeySecretRef": {"name": "keys", "key": "k"}},
            "groupSize": 2,
            "concurrency": 4,
            **spec,
        },
    }


async def setup_cluster(farm: Farm, tmp_path: Path, names: list[str]) -> None:
    roots = [tmp_path / "tasks" / name for name in names]
    await farm.api.create(
        CONFIG_MAPS,
        NS,
        {"metadata": {"name": "tasks"}, "binaryData": {"tasks.tar.gz": task_archive(*roots)}},
    )
    secret = {"metadata": {"name": "keys"}, "data": {"k": base64.b64encode(b"sk-1").decode()}}
    await farm.api.create(SECRETS, NS, secret)


async def test_a_rolloutjob_runs_streams_its_groups_mirrors_counts_and_deletes_clean(
    tmp_path: Path,
) -> None:
    names = ["alpha", "beta"]
    for name in names:
        make_task(tmp_path / "tasks" / name, name)
    async with farm(tmp_path, names) as f:
        await setup_cluster(f, tmp_path, names)
        await f.api.create(ROLLOUT_JOBS, NS, rolloutjob("smoke"))
        await until(lambda: ((f.rolloutjob("smoke") or {}).get("status") or {}).get("jobId"))
        job = f.rolloutjob("smoke")
        assert job is not None
        assert job["metadata"]["finalizers"] == [FINALIZER]
        job_id = job["status"]["jobId"]
        assert job["status"]["apiAddress"].endswith(f"/v1/jobs/{job_id}")

        groups = [g async for g in f.client.groups(job_id)]
        assert sorted(g.task_id for g in groups) == names
        assert all(len(g.trajectories) == 2 for g in groups)
        assert all(t["reward"]["value"] == 1.0 for g in groups for t in g.trajectories)

        await until(lambda: (f.rolloutjob("smoke") or {})["status"].get("phase") == "Completed")
        await until(lambda: f.status("smoke")["counts"]["groupsDelivered"] == 2)
        view = await f.client.job(job_id)
        status = f.status("smoke")
        assert status["counts"] == {
            "episodes": view.counts.episodes,
            "queued": view.counts.queued,
            "running": view.counts.running,
            "completed": view.counts.completed,
            "valid": view.counts.valid,
            "infraErrors": view.counts.infra_errors,
            "groupsCompleted": view.counts.groups_completed,
            "groupsDelivered": view.counts.groups_acked,
        }
        assert status["counts"]["episodes"] == 4
        assert status["counts"]["valid"] == 4
        [ready] = status["conditions"]
        assert (ready["type"], ready["status"], ready["reason"]) == (
            "Ready",
            "True",
            "JobCompleted",
        )
        assert view.request["policy"]["base_url"] == "oracle"
        assert "api_key" not in view.request["policy"]  # kept for the workers, never shown
        assert view.request["group_size"] == 2
        assert view.request["concurrency"] == 4

        await f.api.delete(ROLLOUT_JOBS, NS, "smoke")
        await until(lambda: f.rolloutjob("smoke") is None)
        assert f.pods() == []


async def test_deleting_a_running_rolloutjob_cancels_its_job_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    make_task(tmp_path / "tasks" / "alpha", "alpha")
    async with farm(tmp_path, ["alpha"]) as f:
        await setup_cluster(f, tmp_path, ["alpha"])
        f.gate.clear()
        await f.api.create(ROLLOUT_JOBS, NS, rolloutjob("long"))
        # Both environments exist as pods: the main container and the database sidecar.
        await until(lambda: len(f.pods()) == 2)
        for pod in f.pods():
            containers = [c["name"] for c in pod["spec"]["containers"]]
            assert len(containers) == 2
            assert "db" in containers
        await until(
            lambda: (f.rolloutjob("long") or {}).get("status", {}).get("phase") == "Running"
        )
        job_id = f.status("long")["jobId"]

        await f.api.patch(ROLLOUT_JOBS, NS, "long", {"spec": {"paused": True}})
        await until(lambda: f.status("long").get("phase") == "Paused")
        assert (await f.client.job(job_id)).status == "paused"
        await f.api.patch(ROLLOUT_JOBS, NS, "long", {"spec": {"paused": False}})
        await until(lambda: f.status("long").get("phase") == "Running")

        await f.api.delete(ROLLOUT_JOBS, NS, "long")
        await until(lambda: f.rolloutjob("long") is None)
        assert (await f.client.job(job_id)).status == "cancelled"
        await until(lambda: f.pods() == [])
        assert f.api.objects(ROLLOUT_JOBS) == []


async def test_an_unknown_task_is_a_permanent_condition_not_a_retry_loop(tmp_path: Path) -> None:
    make_task(tmp_path / "tasks" / "alpha", "alpha")
    make_task(tmp_path / "tasks" / "beta", "beta")
    async with farm(tmp_path, ["alpha"]) as f:  # the API serves alpha only
        await setup_cluster(f, tmp_path, ["alpha", "beta"])
        await f.api.create(ROLLOUT_JOBS, NS, rolloutjob("bad"))

        def reason() -> str | None:
            conditions = ((f.rolloutjob("bad") or {}).get("status") or {}).get("conditions")
            return conditions[0]["reason"] if conditions else None

        await until(lambda: reason() is not None)
        [ready] = f.status("bad")["conditions"]
        assert (ready["status"], ready["reason"]) == ("False", "UnknownTask")
        assert "'beta'" in ready["message"]
        assert f.operator.failures == {}  # not queued for a retry
        assert await f.client.jobs() == []
        await f.api.delete(ROLLOUT_JOBS, NS, "bad")
        await until(lambda: f.rolloutjob("bad") is None)
