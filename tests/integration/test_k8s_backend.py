"""The Kubernetes sandbox backend against the in-memory API with a simulated kubelet.

The API, the kubelet and the pod's helper are simulated (the helper by the in-process emulator
over a fake sandbox); the backend's control logic, the pod watch, the channel client and its
stream transport are the real code.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envfarm.errors import SandboxGone, SandboxStartError
from envfarm.k8s.api import CONFIG_MAPS, PODS, KubeObject
from envfarm.sandbox.base import verifier_phases
from envfarm.sandbox.kubernetes.backend import KubernetesBackend, KubernetesBackendConfig
from envfarm.sandbox.kubernetes.environment_pods import LABEL_OWNER_HOST, LABEL_OWNER_PROCESS
from envfarm.sandbox.kubernetes.podspec import LABEL_NETWORK, PodOptions, environment_pod
from envfarm.sandbox.kubernetes.sandbox import KubernetesSandbox
from envfarm.spec.task import Task, load_task
from envfarm.testing.fake_sandbox import FakeSandbox, ok
from envfarm.testing.k8s.fakeruntime import FakePodRuntime
from envfarm.testing.k8s.kubelet import SimulatedKubelet
from envfarm.testing.k8s.memory import MemoryKubeApi
from tests.plans import sandbox_spec

TASKS = Path(__file__).resolve().parents[2] / "tasks"
NS = "envfarm-sandboxes"


class Cluster:
    def __init__(self, **kubelet: Any) -> None:
        self.api = MemoryKubeApi()
        self.ready: dict[str, bool] = {}
        """Container name -> does its readiness probe pass (default yes)."""
        self.runtime = FakePodRuntime(lambda pod: FakeSandbox(lambda c: ok(f"ran: {c}")))
        self.kubelet = SimulatedKubelet(
            self.api,
            readiness=lambda pod, name: self.ready.get(name, True),
            runtime=self.runtime,
            probe_period_s=0.01,
            **kubelet,
        )

    def backend(self, **config: Any) -> KubernetesBackend:
        return KubernetesBackend(self.api, KubernetesBackendConfig(**config))

    def pods(self) -> list[KubeObject]:
        return self.api.objects(PODS)

    async def wait_for(self, predicate: Callable[[KubeObject], bool]) -> None:
        async for event in self.api.watch(PODS, NS):
            if predicate(event.object):
                return


@pytest.fixture
def pg_task() -> Task:
    """Graded in the agent's pod: Kubernetes has no fresh verifier next to sidecars."""
    task = load_task(TASKS / "pg-schema-migration")
    verifier = task.config.verifier.model_copy(update={"environment_mode": "shared"})
    return dataclasses.replace(task, config=task.config.model_copy(update={"verifier": verifier}))


@pytest.fixture
def plain_task() -> Task:
    return load_task(TASKS / "word-count-cli")


def _running(pod: KubeObject) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running"


async def test_start_waits_for_every_healthcheck_then_speaks_over_the_stream(pg_task: Task) -> None:
    cluster = Cluster()
    cluster.ready["db"] = False
    backend = cluster.backend()
    sandbox = backend.create(
        sandbox_spec(pg_task), await backend.prepare(sandbox_spec(pg_task)), run_id="run-1"
    )
    starting = asyncio.ensure_future(sandbox.start())
    await cluster.wait_for(_running)
    await asyncio.sleep(0.05)
    assert not starting.done()  # the database's healthcheck has not passed
    cluster.ready["db"] = True
    cluster.kubelet.probe_now()
    await starting
    [pod] = cluster.pods()
    fake = cluster.runtime.sandbox_of(pod)
    assert isinstance(fake, FakeSandbox)
    result = await sandbox.exec("psql -c 'select 1'", timeout=5)
    assert (result.exit_code, result.stdout) == (0, "ran: psql -c 'select 1'")
    assert fake.commands == ["psql -c 'select 1'"]
    big = bytes(range(256)) * 12_000
    await sandbox.write_file("/app/big.bin", big)
    assert fake.files["/app/big.bin"] == big
    assert await sandbox.read_file("/app/big.bin") == big
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file("/nowhere")
    await sandbox.stop()
    assert cluster.pods() == []
    assert not fake.running
    await backend.close()
    await cluster.api.close()


async def test_many_sandboxes_share_one_watch_and_each_has_one_stream(plain_task: Task) -> None:
    cluster = Cluster()
    backend = cluster.backend()
    image = await backend.prepare(sandbox_spec(plain_task))
    sandboxes = [backend.create(sandbox_spec(plain_task), image, run_id="run-2") for _ in range(25)]
    await asyncio.gather(*(s.start() for s in sandboxes))
    await asyncio.gather(*(s.exec(f"echo {i}") for i, s in enumerate(sandboxes) for _ in range(3)))
    # one list and one watch of the pods, and of the EnvPools (a task's pool is looked up)
    assert cluster.api.calls["watch"] == 2
    assert cluster.api.calls["list"] == 2
    assert cluster.runtime.attaches == 25
    await asyncio.gather(*(s.stop() for s in sandboxes))
    assert cluster.pods() == []
    await backend.close()
    await cluster.api.close()


async def test_a_service_that_dies_fails_the_start_and_nothing_is_left(pg_task: Task) -> None:
    cluster = Cluster()
    cluster.ready["db"] = False
    backend = cluster.backend()
    sandbox = backend.create(
        sandbox_spec(pg_task), await backend.prepare(sandbox_spec(pg_task)), run_id="run-3"
    )
    starting = asyncio.ensure_future(sandbox.start())
    await cluster.wait_for(_running)
    [pod] = cluster.pods()
    await cluster.kubelet.terminate_container(NS, pod["metadata"]["name"], "db", reason="OOMKilled")
    with pytest.raises(SandboxStartError, match=r"'db' was killed by the OOM killer"):
        await starting
    assert cluster.pods() == []
    await backend.close()
    await cluster.api.close()


async def test_a_start_that_never_gets_ready_times_out_with_the_pods_state(
    plain_task: Task,
) -> None:
    cluster = Cluster(start_delay_s=3600)
    backend = cluster.backend(start_timeout_s=0.05)
    sandbox = backend.create(
        sandbox_spec(plain_task), await backend.prepare(sandbox_spec(plain_task)), run_id="run-4"
    )
    with pytest.raises(SandboxStartError, match=r"was not ready within .*phase Pending"):
        await sandbox.start()
    assert cluster.pods() == []
    await backend.close()
    await cluster.api.close()


async def test_the_ttl_ends_the_environment_and_calls_say_so(plain_task: Task) -> None:
    cluster = Cluster(time_scale=0.05)
    backend = cluster.backend(ttl_seconds=1)
    sandbox = backend.create(
        sandbox_spec(plain_task), await backend.prepare(sandbox_spec(plain_task)), run_id="run-5"
    )
    await sandbox.start()
    await cluster.wait_for(lambda pod: pod["status"].get("reason") == "DeadlineExceeded")
    with pytest.raises(SandboxGone, match=r"TTL \(activeDeadlineSeconds\) expired"):
        await sandbox.exec("true")
    await sandbox.stop()
    assert cluster.pods() == []
    await backend.close()
    await cluster.api.close()


async def test_a_deleted_pod_is_reported_gone(plain_task: Task) -> None:
    cluster = Cluster()
    backend = cluster.backend()
    sandbox = backend.create(
        sandbox_spec(plain_task), await backend.prepare(sandbox_spec(plain_task)), run_id="run-6"
    )
    await sandbox.start()
    assert isinstance(sandbox, KubernetesSandbox)
    marked = await cluster.api.delete(PODS, NS, sandbox.name)
    version = marked["metadata"]["resourceVersion"]
    async for event in cluster.api.watch(PODS, NS, resource_version=version):
        if event.type == "DELETED":  # the kubelet stopped the containers, then the pod went
            break
    with pytest.raises(SandboxGone, match="the pod was deleted"):
        await sandbox.exec("true")
    await sandbox.stop()
    await backend.close()
    await cluster.api.close()


async def test_the_watch_survives_410_gone_by_listing_again(plain_task: Task) -> None:
    cluster = Cluster()
    backend = cluster.backend()
    image = await backend.prepare(sandbox_spec(plain_task))
    first = backend.create(sandbox_spec(plain_task), image, run_id="run-7")
    await first.start()
    # Without yielding to the loop: a change the watch has not seen, then history forgotten.
    cluster.api.create_now(CONFIG_MAPS, NS, {"metadata": {"name": "unseen"}})
    cluster.api.compact_history()
    cluster.api.close_watches()
    second = backend.create(sandbox_spec(plain_task), image, run_id="run-7")
    await second.start()
    assert backend.pods.informer.lists == 2
    await asyncio.gather(first.stop(), second.stop())
    assert cluster.pods() == []
    await backend.close()
    await cluster.api.close()


async def test_verifier_phase_switches_the_network_label(tmp_path: Path, plain_task: Task) -> None:
    cluster = Cluster()
    backend = cluster.backend()
    sandbox = backend.create(
        sandbox_spec(plain_task), await backend.prepare(sandbox_spec(plain_task)), run_id="run-8"
    )
    await sandbox.start()
    assert cluster.pods()[0]["metadata"]["labels"][LABEL_NETWORK] == "none"
    await verifier_phases(sandbox).enter_verifier_phase(network=True)
    assert cluster.pods()[0]["metadata"]["labels"][LABEL_NETWORK] == "internet"
    await verifier_phases(sandbox).enter_verifier_phase(network=False)
    assert cluster.pods()[0]["metadata"]["labels"][LABEL_NETWORK] == "none"
    await sandbox.stop()
    await backend.close()
    await cluster.api.close()


async def test_reap_removes_ended_pods_and_an_earlier_process_pods(plain_task: Task) -> None:
    cluster = Cluster()
    backend = cluster.backend()
    images = backend.images(sandbox_spec(plain_task))
    mine = backend.pod_options(sandbox_spec(plain_task), "live")
    earlier = backend.pod_options(sandbox_spec(plain_task), "old").model_copy(
        update={
            "labels": {LABEL_OWNER_HOST: backend.host, LABEL_OWNER_PROCESS: "1-2-dead"},
        }
    )
    elsewhere = backend.pod_options(sandbox_spec(plain_task), "other").model_copy(
        update={"labels": {LABEL_OWNER_HOST: "another-host", LABEL_OWNER_PROCESS: "9"}}
    )
    for options in (mine, earlier, elsewhere):
        await cluster.api.create(
            PODS, NS, environment_pod(sandbox_spec(plain_task), images, options)
        )
    ended = PodOptions(environment_id="ended", run_id="x", labels=elsewhere.labels)
    created = await cluster.api.create(
        PODS, NS, environment_pod(sandbox_spec(plain_task), images, ended)
    )
    await cluster.wait_for(lambda pod: _running(pod) and pod["metadata"]["name"] == "envfarm-ended")
    await cluster.kubelet.terminate_container(NS, created["metadata"]["name"], "main", exit_code=0)
    reaped = await backend.reap()
    assert sorted(reaped) == sorted([f"envfarm-{earlier.environment_id}", "envfarm-ended"])
    await cluster.wait_for(lambda pod: len(cluster.pods()) == 2)
    left = {p["metadata"]["name"] for p in cluster.pods()}
    assert left == {f"envfarm-{mine.environment_id}", f"envfarm-{elsewhere.environment_id}"}
    await backend.close()
    await cluster.api.close()
