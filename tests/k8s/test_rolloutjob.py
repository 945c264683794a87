"""A RolloutJob and an EnvPool on a real cluster, through ``envfarm operator`` and ``envfarm
serve`` with the Kubernetes backend (both as processes of this machine, as a developer runs
them against a cluster): the pool keeps warm pods, the job's episodes claim them, every
episode runs as pods (``tasks/pg-schema-migration`` in the default clean mode), and the
trainer's client receives each graded group exactly once."""

from __future__ import annotations

import asyncio
import shutil
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from envfarm.client import EnvfarmClient
from envfarm.sandbox.kubernetes.podspec import LABEL_RUN, label_value
from tests.fake_tasks import task_archive
from tests.integration.serve_process import ProductProcess, ServeProcess, free_port
from tests.k8s.cluster import Cluster
from tests.k8s.pods import POD_TASKS, TASKS, namespace, pods_in, pushed
from tests.step_sessions import migrate_pg_schema
from tests.waiting import until

__all__ = ["namespace", "pushed"]  # fixtures

pytestmark = pytest.mark.asyncio(loop_scope="session")

TOKEN = "k8s-test-token"
CRDS = Path(__file__).resolve().parents[2] / "manifests" / "base" / "crds"
POOL_TASK = "envfarm/word-count-cli"


@pytest.fixture(scope="module")
def crds(cluster: Cluster) -> None:
    """envfarm's CRDs, established (left installed: another module may be using them)."""
    for crd in ("rolloutjobs.envfarm.dev", "envpools.envfarm.dev"):
        deleting = cluster.kubectl(
            *("get", f"crd/{crd}", "--ignore-not-found"),
            *("-o", "jsonpath={.metadata.deletionTimestamp}"),
        )
        if deleting.strip():  # an earlier module's teardown: it must be gone before the apply
            cluster.kubectl("wait", "--for=delete", f"crd/{crd}", "--timeout=120s")
    cluster.kubectl("apply", "--server-side", "--field-manager=envfarm-tests", "-k", str(CRDS))
    for crd in ("rolloutjobs.envfarm.dev", "envpools.envfarm.dev"):
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=120s")


@dataclass
class Farm:
    url: str
    serve: ServeProcess
    operator: ProductProcess


@pytest.fixture(scope="module")
def farm(
    cluster: Cluster,
    namespace: str,
    crds: None,
    pushed: object,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Farm]:
    """``envfarm serve`` (API and worker, pods in ``namespace``, on a port of its own so that
    it can be restarted at the same address) and ``envfarm operator`` on the same task
    library."""
    work = tmp_path_factory.mktemp("farm")
    library = work / "tasks"
    for name in POD_TASKS:
        shutil.copytree(TASKS / name, library / name)
    env = {
        "KUBECONFIG": cluster.kubeconfig,
        "ENVFARM_SANDBOX_BACKEND": "kubernetes",
        "ENVFARM_SANDBOX_NAMESPACE": namespace,
        "ENVFARM_IMAGE_REGISTRY": cluster.registry,
    }
    serve = ServeProcess(
        work, "--tasks", str(library), "--data-dir", str(work / "data"), "--concurrency", "2",
        "--port", str(free_port()), token=TOKEN, env=env,
    ).start()  # fmt: skip
    operator = ProductProcess(
        work,
        [sys.executable, "-m", "envfarm", "operator", "--namespace", namespace,
         "--kubeconfig", cluster.kubeconfig, "--api", serve.url, "--token", TOKEN,
         "--tasks", str(library), "--poll", "1"],
        r"envfarm: operator on",
        log_name="operator.log",
        env={"ENVFARM_IMAGE_REGISTRY": cluster.registry},
    ).start()  # fmt: skip
    try:
        yield Farm(serve.url, serve, operator)
    finally:
        operator.stop()
        serve.stop()


def _claimed_pods(cluster: Cluster, namespace: str, seen: set[str], done: threading.Event) -> None:
    while not done.is_set():
        out = cluster.kubectl(
            *("-n", namespace, "get", "pods", "-l", "envfarm.dev/claimed-by", "-o", "name"),
            check=False,
        )
        seen.update(line for line in out.splitlines() if line.startswith("pod/"))
        done.wait(0.5)


async def _some_pod_runs(cluster: Cluster, namespace: str, farm: Farm) -> None:
    """Returns once a pod in ``namespace`` runs; if none does, fails with what the cluster and
    the farm say."""
    running = ("-n", namespace, "get", "pods", "--field-selector=status.phase=Running")
    try:
        await until(lambda: cluster.kubectl(*running, "-o", "name").strip(), timeout_s=300)
    except AssertionError as exc:
        pods = cluster.kubectl("-n", namespace, "get", "pods", "-o", "wide", check=False)
        events = cluster.kubectl("-n", namespace, "get", "events", check=False)
        said = {
            "pods": pods,
            "events": events[-3000:],
            "serve": farm.serve.output()[-3000:],
            "operator": farm.operator.output()[-2000:],
            **{daemon: cluster.log_tail(daemon) for daemon in ("kubelet", "kube-apiserver")},
        }
        report = "\n".join(f"--- {name}:\n{text}" for name, text in said.items())
        raise AssertionError(f"no pod of the job runs ({exc}):\n{report}") from None


def _submit(cluster: Cluster, namespace: str, name: str) -> str:
    """A RolloutJob of the oracle on the example tasks (a ConfigMap of them), groups of two;
    the id of its job in the API."""
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "tasks", "namespace": namespace},
        "binaryData": {"tasks.tar.gz": task_archive(*(TASKS / task for task in POD_TASKS))},
    }
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(config_map))
    job = {
        "apiVersion": "envfarm.dev/v1alpha1",
        "kind": "RolloutJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "tasks": {"configMap": {"name": "tasks"}},
            "policy": {"baseUrl": "oracle"},
            "groupSize": 2,
            "concurrency": 2,
        },
    }
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(job))
    resource = f"rolloutjobs.envfarm.dev/{name}"
    cluster.kubectl(
        "-n", namespace, "wait", resource, "--for=jsonpath={.status.jobId}", "--timeout=120s"
    )
    return cluster.kubectl(
        "-n", namespace, "get", resource, "-o", "jsonpath={.status.jobId}"
    ).strip()


async def _delivered_once(farm: Farm, job_id: str) -> None:
    """Every group of the job comes to the trainer's client once, all graded 1.0."""
    async with EnvfarmClient(farm.url, TOKEN) as client:
        groups = [group async for group in client.groups(job_id, wait_s=5.0)]
        again = [group async for group in client.groups(job_id, wait_s=1.0)]
    assert sorted(group.task_id for group in groups) == sorted(
        ["envfarm/word-count-cli", "envfarm/pg-schema-migration"]
    )
    episodes = [t["episode_id"] for group in groups for t in group.trajectories]
    assert len(episodes) == len(set(episodes)) == 4
    assert [t["reward"]["value"] for g in groups for t in g.trajectories] == [1.0] * 4
    assert again == []  # acknowledged groups are not delivered twice


def _completed_and_deleted(cluster: Cluster, namespace: str, name: str) -> None:
    resource = f"rolloutjobs.envfarm.dev/{name}"
    cluster.kubectl(
        *("-n", namespace, "wait", resource),
        *("--for=jsonpath={.status.phase}=Completed", "--timeout=120s"),
    )
    cluster.kubectl("-n", namespace, "delete", resource, "--timeout=120s")


def _no_pods_left(cluster: Cluster, namespace: str) -> None:
    """The pods still terminating are waited for; then none may be left."""
    cluster.kubectl(
        *("-n", namespace, "wait", "--for=delete", "pods", "--all", "--timeout=120s"),
        check=False,
    )
    assert pods_in(cluster, namespace) == []


async def test_a_rolloutjob_claims_warm_pods_and_delivers_each_group_once(
    cluster: Cluster, namespace: str, farm: Farm
) -> None:
    pool = {
        "apiVersion": "envfarm.dev/v1alpha1",
        "kind": "EnvPool",
        "metadata": {"name": "wc-pool", "namespace": namespace},
        "spec": {"taskRef": {"name": POOL_TASK}, "replicas": 1},
    }
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(pool))
    cluster.kubectl(
        *("-n", namespace, "wait", "envpools.envfarm.dev/wc-pool"),
        *("--for=jsonpath={.status.readyReplicas}=1", "--timeout=300s"),
    )
    claimed: set[str] = set()
    done = threading.Event()
    watching = asyncio.create_task(
        asyncio.to_thread(_claimed_pods, cluster, namespace, claimed, done)
    )
    job_id = _submit(cluster, namespace, "smoke")
    await _delivered_once(farm, job_id)
    done.set()
    await watching
    assert any(name.startswith("pod/wc-pool-") for name in claimed), claimed
    _completed_and_deleted(cluster, namespace, "smoke")
    cluster.kubectl("-n", namespace, "delete", "envpools.envfarm.dev/wc-pool", "--timeout=120s")
    _no_pods_left(cluster, namespace)


async def test_an_openenv_session_on_pods_is_graded_beside_its_services(
    cluster: Cluster, namespace: str, farm: Farm
) -> None:
    """The step API on the Kubernetes backend: a session's pod and its services, graded by the
    clean-room verifier beside them, as a job's episode would be."""
    job_id = await migrate_pg_schema(f"{farm.url}/v1/openenv/{TOKEN}")
    run = f"{LABEL_RUN}={label_value(job_id)}"
    cluster.kubectl(*("-n", namespace, "wait", "--for=delete", "pods", "-l", run),
                    "--timeout=120s", check=False)  # fmt: skip
    assert cluster.kubectl("-n", namespace, "get", "pods", "-l", run, "-o", "name") == ""


async def test_the_operator_and_the_worker_killed_mid_job_lose_nothing(
    cluster: Cluster, namespace: str, farm: Farm
) -> None:
    """SIGKILL both while episodes run as pods, start them again: the new worker takes the
    dead one's episodes back and deletes its pods, the operator adopts the job it recorded,
    and the trainer still gets every group once."""
    job_id = _submit(cluster, namespace, "faults")
    await _some_pod_runs(cluster, namespace, farm)
    farm.operator.kill()
    farm.serve.kill()
    farm.serve.start()
    farm.operator.start()
    await _delivered_once(farm, job_id)
    _completed_and_deleted(cluster, namespace, "faults")
    _no_pods_left(cluster, namespace)


async def test_an_api_server_restarted_mid_job_loses_nothing(
    cluster: Cluster, namespace: str, farm: Farm
) -> None:
    """Every watch and every helper stream goes through the API server. A restart (SIGTERM,
    the API server's graceful shutdown) ends the watches, which list again; a stream it ends
    makes its episode an infrastructure fault, run again; the trainer gets every group once."""
    if not cluster.managed:
        pytest.skip("restarts the API server of the project's own cluster only")
    job_id = _submit(cluster, namespace, "restart")
    await _some_pod_runs(cluster, namespace, farm)
    await asyncio.to_thread(cluster.restart, "kube-apiserver")
    await _delivered_once(farm, job_id)
    _completed_and_deleted(cluster, namespace, "restart")
    _no_pods_left(cluster, namespace)
