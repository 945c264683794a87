"""What the pod tests share: a namespace of their own, the example tasks' images pushed where
the cluster pulls, and a Kubernetes backend on the test cluster."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from envfarm.controller.cluster_images import push_cluster_images
from envfarm.k8s.kubeconfig import load_kubeconfig
from envfarm.k8s.rest import RestKubeApi
from envfarm.sandbox.kubernetes.backend import KubernetesBackend, KubernetesBackendConfig
from envfarm.sandbox.kubernetes.podimages import ImageNaming
from envfarm.spec.task import Task, load_task
from tests.k8s.cluster import Cluster

TASKS = Path(__file__).resolve().parents[2] / "tasks"
POD_TASKS = ("word-count-cli", "pg-schema-migration")


def pod_task(name: str) -> Task:
    return load_task(TASKS / name)


@pytest.fixture(scope="session")
def pushed(cluster: Cluster) -> list[Task]:
    """The tasks of ``POD_TASKS``, their images and the helper's pushed, as ``envfarm push``
    pushes them."""
    tasks = [pod_task(name) for name in POD_TASKS]
    asyncio.run(push_cluster_images(tasks, ImageNaming(registry=cluster.registry)))
    return tasks


@pytest.fixture(scope="module")
def namespace(cluster: Cluster) -> Iterator[str]:
    """A namespace of the module's, at the sandboxes' Pod Security level, with the service
    account environment pods run as."""
    name = f"envfarm-tests-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    cluster.kubectl("label", "namespace", name, "pod-security.kubernetes.io/enforce=baseline")
    cluster.kubectl("-n", name, "create", "serviceaccount", "envfarm-sandbox")
    yield name
    # a RolloutJob whose operator has gone keeps its finalizer, and the namespace with it
    jobs = cluster.kubectl("-n", name, "get", "rolloutjobs.envfarm.dev", "-o", "name", check=False)
    for job in (line for line in jobs.splitlines() if "/" in line and " " not in line):
        finalizers = '{"metadata":{"finalizers":null}}'
        cluster.kubectl("-n", name, "patch", job, "--type=merge", "-p", finalizers, check=False)
    cluster.kubectl("delete", "namespace", name, "--wait=false")


def pods_in(cluster: Cluster, namespace: str) -> list[str]:
    out = cluster.kubectl("-n", namespace, "get", "pods", "-o", "name")
    return [line for line in out.splitlines() if line.startswith("pod/")]


@asynccontextmanager
async def pod_backend(cluster: Cluster, namespace: str) -> AsyncIterator[KubernetesBackend]:
    api = RestKubeApi(await load_kubeconfig(Path(cluster.kubeconfig)))
    config = KubernetesBackendConfig(
        namespace=namespace, images=ImageNaming(registry=cluster.registry)
    )
    backend = KubernetesBackend(api, config)
    try:
        yield backend
    finally:
        await backend.close()
        await api.close()
