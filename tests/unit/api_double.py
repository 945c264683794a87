"""An in-memory stand-in for the controller, for tests of the HTTP shell and the client only.

It implements the ``JobService`` operations with plain dictionaries; the test adds groups and
ends jobs by hand. Anything about real scheduling, storage or delivery across restarts is
tested against the real controller (tests/integration/test_api_*.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime

from envfarm.controller.metrics import MetricsSnapshot
from envfarm.errors import InvalidJobState, JobNotFound, UnknownTask
from envfarm.models.jobs import (
    TERMINAL_STATUSES,
    DeliveredGroup,
    GroupPage,
    JobCounts,
    JobRequest,
    JobStatus,
    JobView,
    RawGroup,
    RawGroupPage,
    TaskInfo,
    redacted,
)

TASKS = ("alpha", "beta")


class MemoryService:
    def __init__(self) -> None:
        self.requests: dict[str, JobRequest] = {}
        self.status: dict[str, JobStatus] = {}
        self.delivered: dict[str, list[DeliveredGroup]] = {}
        self.acked: dict[tuple[str, str], int] = {}
        self.versions: list[str] = []
        self.changed = asyncio.Event()
        self.snapshot = MetricsSnapshot()
        self.fail_with: Exception | None = None

    async def submit(self, request: JobRequest) -> str:
        if self.fail_with is not None:
            raise self.fail_with
        for index, task in enumerate(request.tasks):
            if task not in TASKS:
                raise UnknownTask(f"unknown task {task!r}", field=f"tasks[{index}]")
        job_id = f"job-{len(self.requests) + 1}"
        self.requests[job_id] = request
        self.status[job_id] = "queued"
        self.delivered[job_id] = []
        return job_id

    def add_group(self, job_id: str, task_id: str = "alpha", size: int = 2) -> DeliveredGroup:
        cursor = len(self.delivered[job_id]) + 1
        group_id = f"{job_id}-g{cursor}"
        trajectories = [
            {"trajectory_id": f"{group_id}-t{i}", "group_id": group_id, "task_id": task_id,
             "reward": {"value": 1.0, "valid": True}}
            for i in range(size)
        ]  # fmt: skip
        group = DeliveredGroup(
            cursor=cursor, group_id=group_id, task_id=task_id, trajectories=trajectories
        )
        self.delivered[job_id].append(group)
        self.changed.set()
        return group

    def finish(self, job_id: str, status: JobStatus = "completed") -> None:
        self.status[job_id] = status
        self.changed.set()

    async def job(self, job_id: str) -> JobView:
        if job_id not in self.requests:
            raise JobNotFound(f"no job {job_id!r}")
        now = datetime.now(UTC)
        groups = self.delivered[job_id]
        return JobView(
            id=job_id,
            status=self.status[job_id],
            request=redacted(self.requests[job_id]),
            counts=JobCounts(groups=len(groups), groups_completed=len(groups)),
            created_at=now,
            updated_at=now,
            last_cursor=groups[-1].cursor if groups else 0,
        )

    async def jobs(self) -> list[JobView]:
        return [await self.job(job_id) for job_id in self.requests]

    async def _move(self, job_id: str, allowed: tuple[str, ...], to: JobStatus) -> JobView:
        view = await self.job(job_id)
        if view.status not in allowed:
            raise InvalidJobState(f"job {job_id} is {view.status}")
        self.status[job_id] = to
        return await self.job(job_id)

    async def pause(self, job_id: str) -> JobView:
        return await self._move(job_id, ("queued", "running"), "paused")

    async def resume(self, job_id: str) -> JobView:
        return await self._move(job_id, ("paused",), "running")

    async def cancel(self, job_id: str) -> JobView:
        return await self._move(job_id, ("queued", "running", "paused"), "cancelled")

    async def groups(
        self,
        job_id: str,
        *,
        after: int | None,
        limit: int,
        wait_s: float,
        consumer: str = "default",
        packed: bool = False,
    ) -> RawGroupPage:
        await self.job(job_id)
        start = self.acked.get((job_id, consumer), 0) if after is None else after
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            ready = [g for g in self.delivered[job_id] if g.cursor > start][:limit]
            remaining = deadline - loop.time()
            if ready or remaining <= 0 or self.status[job_id] in TERMINAL_STATUSES:
                break
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), remaining)
        page = GroupPage(groups=ready, next_cursor=ready[-1].cursor if ready else None)
        return RawGroupPage([RawGroup.of(group) for group in page.groups], page.next_cursor)

    async def ack(self, job_id: str, cursor: int, consumer: str = "default") -> None:
        await self.job(job_id)
        key = (job_id, consumer)
        self.acked[key] = max(self.acked.get(key, 0), cursor)

    async def publish_version(self, version: str) -> None:
        self.versions.append(version)

    def tasks(self) -> list[TaskInfo]:
        return [TaskInfo(id=task, content_hash=f"hash-{task}") for task in TASKS]

    async def metrics(self) -> MetricsSnapshot:
        return self.snapshot
