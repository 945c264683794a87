"""What the API needs from the controller: the operations behind the routes, nothing more.

``envfarm.controller.service.Controller`` implements it; the API depends on this protocol so the
HTTP shell stays a shell (parse, call, render) and reads as a list of the calls it makes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from pydantic import BaseModel

from envfarm.models.jobs import JobRequest, JobView, RawGroupPage, TaskInfo


class JobService(Protocol):
    async def submit(self, request: JobRequest) -> str: ...

    async def job(self, job_id: str) -> JobView: ...

    async def jobs(self) -> list[JobView]: ...

    async def pause(self, job_id: str) -> JobView: ...

    async def resume(self, job_id: str) -> JobView: ...

    async def cancel(self, job_id: str) -> JobView: ...

    async def groups(
        self,
        job_id: str,
        *,
        after: int | None,
        limit: int,
        wait_s: float,
        consumer: str = "default",
        packed: bool = False,
    ) -> RawGroupPage: ...

    async def ack(self, job_id: str, cursor: int, consumer: str = "default") -> None: ...

    async def publish_version(self, version: str) -> None: ...

    def tasks(self) -> list[TaskInfo]: ...

    async def metrics(self) -> BaseModel | Mapping[str, Any]: ...
