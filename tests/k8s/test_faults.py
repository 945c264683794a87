"""Faults on a real cluster: an environment pod deleted under a running episode is an
infrastructure fault (never a reward), and the episode runs again to a graded end."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from envfarm.controller.assembly import open_runner
from envfarm.controller.cluster_images import push_cluster_images
from envfarm.controller.job import Job
from envfarm.models.jobs import JobPolicy, JobRequest
from envfarm.models.trajectory import Trajectory
from envfarm.sandbox.kubernetes.podimages import ImageNaming
from envfarm.spec.task import Task, load_task
from tests.k8s.cluster import Cluster
from tests.k8s.pods import TASKS, namespace, pod_backend, pods_in

__all__ = ["namespace"]  # fixtures

pytestmark = pytest.mark.asyncio(loop_scope="session")

SLOW_S = 20


def slow_task(root: Path) -> Task:
    """``word-count-cli`` whose solution first sleeps, so that its pod can be deleted under it."""
    shutil.copytree(TASKS / "word-count-cli", root)
    solve = root / "solution" / "solve.sh"
    lines = solve.read_text().splitlines(keepends=True)
    solve.write_text("".join([lines[0], f"sleep {SLOW_S}\n", *lines[1:]]))
    return load_task(root)


async def _delete_the_first_running_pod(cluster: Cluster, namespace: str) -> str:
    while True:
        running = await asyncio.to_thread(
            cluster.kubectl,
            *("-n", namespace, "get", "pods", "--field-selector=status.phase=Running"),
            *("-o", "name"),
        )
        if pods := [line for line in running.splitlines() if line.startswith("pod/")]:
            await asyncio.sleep(3)  # the agent is inside its solution's sleep
            await asyncio.to_thread(cluster.kubectl, "-n", namespace, "delete", pods[0])
            return pods[0]
        await asyncio.sleep(0.5)


async def _run_and_delete(
    cluster: Cluster, namespace: str, tmp_path: Path, max_retries: int
) -> tuple[Trajectory, str]:
    task = slow_task(tmp_path / "slow")
    await push_cluster_images([task], ImageNaming(registry=cluster.registry))
    request = JobRequest(
        tasks=[task.id], policy=JobPolicy(base_url="oracle"), group_size=1, max_retries=max_retries
    )
    async with (
        pod_backend(cluster, namespace) as backend,
        open_runner(request, backend, run_id="faults", artifacts_dir=tmp_path / "out") as runner,
    ):
        deleting = asyncio.create_task(_delete_the_first_running_pod(cluster, namespace))
        result = await Job([task], runner, request).run()
        deleted = await deleting
    [trajectory] = result.trajectories
    assert pods_in(cluster, namespace) == []
    return trajectory, deleted


async def test_a_pod_deleted_under_an_episode_is_an_infrastructure_fault(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    lost, deleted = await _run_and_delete(cluster, namespace, tmp_path, max_retries=0)
    graded = lost.reward is not None and (lost.reward.value is not None or lost.reward.valid)
    assert not graded, f"{deleted} was deleted, yet the episode was graded: {lost.reward}"
    assert lost.error is not None
    assert lost.error.infrastructure, lost.error


async def test_a_pod_deleted_under_an_episode_is_run_again(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    graded, deleted = await _run_and_delete(cluster, namespace, tmp_path, max_retries=1)
    assert graded.reward is not None
    assert graded.reward.value == 1.0
    assert graded.attempt == 1, f"{deleted} was deleted, yet its attempt was graded"
