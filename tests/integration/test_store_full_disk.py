"""A full disk under the SQLite store is a clear ``StoreError`` naming the store, and nothing
the store acknowledged is lost: every trajectory whose ``record`` returned is still there,
after the failure and after reopening. The disk is a small tmpfs the test mounts itself
(skipped where mounting is not allowed)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from envfarm.controller.groups import finalize_group
from envfarm.errors import StoreError
from envfarm.models.jobs import JobPolicy, JobRequest
from envfarm.models.trajectory import Provenance, Reward, Trajectory, Turn
from envfarm.store.store import Store

TASKS = [f"disk/t{i}" for i in range(400)]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mountpoint = tmp_path / "disk"
    mountpoint.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mountpoint)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=True)


def trajectory(lease: object) -> Trajectory:
    turn = Turn(index=0, prompt_token_ids=list(range(2000)), completion_token_ids=[7] * 500)
    return Trajectory(
        trajectory_id=f"{lease.episode_id}-a0", episode_id=lease.episode_id,  # type: ignore[attr-defined]
        job_id=lease.job_id, group_id=lease.group_id, task_id=lease.task_id,  # type: ignore[attr-defined]
        turns=[turn], reward=Reward(value=1.0, valid=True),
        provenance=Provenance(task_hash=lease.task_hash, envfarm_version="t"),  # type: ignore[attr-defined]
    )  # fmt: skip


async def test_a_full_disk_is_a_clear_error_and_loses_nothing_recorded(small_disk: Path) -> None:
    url = f"sqlite:///{small_disk / 'store.db'}"
    store = await Store.open(url, finalize=finalize_group)
    recorded: set[str] = set()
    failure: StoreError | None = None
    try:
        request = JobRequest(tasks=TASKS, policy=JobPolicy(base_url="nop"), group_size=1)
        job_id = await store.create_job(request, dict.fromkeys(TASKS, "h"))
        while failure is None and (leases := await store.lease("w", 16, 3600, ["h"])):
            for lease in leases:
                try:
                    await store.record("w", trajectory(lease), final=True)
                except StoreError as exc:
                    failure = exc
                    break
                recorded.add(lease.episode_id)
    finally:
        await store.close()
    assert failure is not None, "the disk never filled"
    assert "full" in str(failure).lower(), failure
    assert "store.db" in str(failure), failure
    assert recorded
    reopened = await Store.open(url, finalize=finalize_group)
    try:
        kept = {row["episode_id"] for row in await reopened.trajectories(job_id)}
    finally:
        await reopened.close()
    assert recorded <= kept
