"""The controller's pod owns the environment pods it starts, against the in-memory API (whose
garbage collector cascades owner references and, like Kubernetes', ignores a namespaced owner
in another namespace)."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfarm.k8s.api import PODS
from envfarm.sandbox.kubernetes.backend import KubernetesBackend, KubernetesBackendConfig
from envfarm.sandbox.kubernetes.ownerpod import LABEL_OWNER_POD_UID, OwnerPod
from envfarm.sandbox.kubernetes.podspec import LABEL_ENVIRONMENT, environment_pod
from envfarm.spec.task import Task, load_task
from envfarm.testing.fake_sandbox import FakeSandbox, ok
from envfarm.testing.k8s.fakeruntime import FakePodRuntime
from envfarm.testing.k8s.kubelet import SimulatedKubelet
from envfarm.testing.k8s.memory import MemoryKubeApi
from tests.plans import sandbox_spec

TASKS = Path(__file__).resolve().parents[2] / "tasks"
SANDBOXES, SYSTEM = "envfarm-sandboxes", "envfarm-system"


@pytest.fixture
def task() -> Task:
    return load_task(TASKS / "word-count-cli")


def _api() -> MemoryKubeApi:
    api = MemoryKubeApi()
    runtime = FakePodRuntime(lambda pod: FakeSandbox(lambda c: ok(c)))
    SimulatedKubelet(api, runtime=runtime, probe_period_s=0.01)
    return api


async def _controller_pod(api: MemoryKubeApi, name: str, namespace: str) -> OwnerPod:
    """A controller's pod as the downward API would describe it."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "worker"}},
        "spec": {"containers": [{"name": "worker", "image": "envfarm"}]},
    }
    created = await api.create(PODS, namespace, pod)
    environ = {
        "ENVFARM_POD_NAME": name,
        "ENVFARM_POD_UID": created["metadata"]["uid"],
        "ENVFARM_POD_NAMESPACE": namespace,
    }
    owner = OwnerPod.from_env(environ)
    assert owner is not None
    return owner


def _environments(api: MemoryKubeApi) -> set[str]:
    pods = api.objects(PODS)
    return {p["metadata"]["name"] for p in pods if LABEL_ENVIRONMENT in p["metadata"]["labels"]}


async def _gone(api: MemoryKubeApi, names: set[str]) -> None:
    async for _ in api.watch(PODS, SANDBOXES):
        if not names & _environments(api):
            return


def test_the_owner_pod_comes_from_the_downward_api_or_not_at_all() -> None:
    assert OwnerPod.from_env({}) is None
    assert OwnerPod.from_env({"ENVFARM_POD_NAME": "w", "ENVFARM_POD_UID": "u"}) is None


async def test_deleting_the_controller_pod_removes_its_environments(task: Task) -> None:
    api = _api()
    owner = await _controller_pod(api, "worker-a", SANDBOXES)
    backend = KubernetesBackend(api, KubernetesBackendConfig(owner_pod=owner))
    image = await backend.prepare(sandbox_spec(task))
    sandboxes = [backend.create(sandbox_spec(task), image, run_id="run-1") for _ in range(3)]
    for sandbox in sandboxes:
        await sandbox.start()
    environments = _environments(api)
    assert len(environments) == 3
    for pod in api.objects(PODS):
        if pod["metadata"]["name"] in environments:
            assert pod["metadata"]["ownerReferences"] == [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": "worker-a",
                    "uid": owner.uid,
                    "controller": False,
                    "blockOwnerDeletion": False,
                }
            ]
    await api.delete(PODS, SANDBOXES, "worker-a", grace_period_seconds=0)
    await _gone(api, environments)
    await backend.close()
    await api.close()


async def test_a_controller_in_another_namespace_is_reaped_by_label_not_referenced(
    task: Task,
) -> None:
    api = _api()
    first = await _controller_pod(api, "worker-a", SYSTEM)
    backend = KubernetesBackend(api, KubernetesBackendConfig(owner_pod=first))
    options = backend.pod_options(sandbox_spec(task), "run-1")
    # No reference across namespaces: Kubernetes would delete such a pod at once.
    pod = environment_pod(sandbox_spec(task), backend.images(sandbox_spec(task)), options)
    assert "ownerReferences" not in pod["metadata"]
    assert pod["metadata"]["labels"][LABEL_OWNER_POD_UID] == first.uid
    await api.create(PODS, SANDBOXES, pod)
    crossed = environment_pod(
        sandbox_spec(task),
        backend.images(sandbox_spec(task)),
        options.model_copy(update={"name": "crossed"}),
    )
    crossed["metadata"]["ownerReferences"] = [first.reference()]
    await api.create(PODS, SANDBOXES, crossed)
    await _gone(api, {"crossed"})

    second = await _controller_pod(api, "worker-b", SYSTEM)
    successor = KubernetesBackend(api, KubernetesBackendConfig(owner_pod=second))
    kept = environment_pod(
        sandbox_spec(task),
        successor.images(sandbox_spec(task)),
        successor.pod_options(sandbox_spec(task), "run-2"),
    )
    await api.create(PODS, SANDBOXES, kept)
    assert await successor.reap() == []  # worker-a is alive: its environment stays
    await api.delete(PODS, SYSTEM, "worker-a", grace_period_seconds=0)
    assert await successor.reap() == [pod["metadata"]["name"]]
    await _gone(api, {pod["metadata"]["name"]})
    assert _environments(api) == {kept["metadata"]["name"]}
    await backend.close()
    await successor.close()
    await api.close()
