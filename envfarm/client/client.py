"""The trainer's side of the REST API: submit jobs, consume graded groups, publish versions.

``groups()`` (long-poll) and ``stream()`` (server-sent events) yield each completed group in
cursor order and, with ``ack=True``, acknowledge it once the consumer's loop body has finished
with it (when the loop asks for the next group), so a group the trainer did not finish is
delivered again after a crash. Both survive server restarts: they retry through the outage and
continue after the last group they yielded. docs/api.md has the exactly-once recipe.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any

import aiohttp

from envfarm.client.http import Backoff, Transport, error_of
from envfarm.client.sse import EventParser
from envfarm.models.jobs import (
    TERMINAL_STATUSES,
    DeliveredGroup,
    GroupPage,
    JobRequest,
    JobView,
    TaskInfo,
)

STREAM_READ_TIMEOUT_S = 90.0


class EnvfarmClient:
    """``async with EnvfarmClient("http://127.0.0.1:8000", token=...) as client: ...``

    ``retry_for_s`` bounds how long one request keeps retrying through an outage (None:
    forever); ``timeout_s`` is the per-request timeout on top of any long-poll wait."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout_s: float = 30.0,
        retry_for_s: float | None = 600.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self._http = Transport(
            base_url, token, timeout_s=timeout_s, retry_for_s=retry_for_s, session=session
        )

    async def __aenter__(self) -> EnvfarmClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.close()

    async def submit(self, request: JobRequest | Mapping[str, Any]) -> str:
        """Submit a job; its id. A dict is sent as is (the server validates it)."""
        body = request_body(request) if isinstance(request, JobRequest) else dict(request)
        answer = await self._http.request("POST", "/v1/jobs", body=body, idempotent=False)
        return str(answer["id"])

    async def job(self, job_id: str) -> JobView:
        return JobView.model_validate(await self._http.request("GET", f"/v1/jobs/{job_id}"))

    async def jobs(self) -> list[JobView]:
        answer = await self._http.request("GET", "/v1/jobs")
        return [JobView.model_validate(view) for view in answer["jobs"]]

    async def pause(self, job_id: str) -> JobView:
        return await self._action(job_id, "pause")

    async def resume(self, job_id: str) -> JobView:
        return await self._action(job_id, "resume")

    async def cancel(self, job_id: str) -> JobView:
        return await self._action(job_id, "cancel")

    async def _action(self, job_id: str, action: str) -> JobView:
        answer = await self._http.request("POST", f"/v1/jobs/{job_id}/{action}")
        return JobView.model_validate(answer)

    async def page(
        self,
        job_id: str,
        *,
        after: int | None = None,
        limit: int = 100,
        wait_s: float = 0.0,
        consumer: str = "default",
    ) -> GroupPage:
        """One long-poll: up to ``limit`` groups after ``after`` (default: the consumer's
        last acknowledged cursor), waiting up to ``wait_s`` for a first one."""
        params: dict[str, str | int | float] = {"limit": limit, "wait": wait_s}
        params["consumer"] = consumer
        if after is not None:
            params["after"] = after
        answer = await self._http.request(
            "GET", f"/v1/jobs/{job_id}/groups", params=params, extra_timeout_s=wait_s
        )
        return GroupPage.model_validate(answer)

    async def ack(self, job_id: str, cursor: int, consumer: str = "default") -> None:
        """Acknowledge the group with this cursor and every one before it."""
        body = {"cursor": cursor, "consumer": consumer}
        await self._http.request("POST", f"/v1/jobs/{job_id}/ack", body=body)

    async def groups(
        self,
        job_id: str,
        *,
        consumer: str = "default",
        after: int | None = None,
        ack: bool = True,
        wait_s: float = 30.0,
        limit: int = 100,
    ) -> AsyncIterator[DeliveredGroup]:
        """Every group of the job from ``after`` (default: the consumer's acknowledged
        cursor) until the job has ended and its last group was yielded."""
        cursor = after
        ended = False
        while True:
            page = await self.page(
                job_id, after=cursor, limit=limit, wait_s=0.0 if ended else wait_s,
                consumer=consumer,
            )  # fmt: skip
            for group in page.groups:
                yield group
                cursor = group.cursor
                if ack:
                    await self.ack(job_id, group.cursor, consumer)
            if page.groups:
                continue
            if ended:
                return
            # One more poll after the job is seen ended: groups may have landed meanwhile.
            ended = (await self.job(job_id)).status in TERMINAL_STATUSES

    async def stream(
        self,
        job_id: str,
        *,
        consumer: str = "default",
        after: int | None = None,
        ack: bool = True,
        read_timeout_s: float = STREAM_READ_TIMEOUT_S,
    ) -> AsyncIterator[DeliveredGroup]:
        """Like ``groups()``, pushed by the server as server-sent events."""
        cursor = after
        backoff = Backoff(self._http.retry_for_s)
        url = self._http.url(f"/v1/jobs/{job_id}/groups")
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._http.timeout_s,
                                        sock_read=read_timeout_s)  # fmt: skip
        while True:
            headers = {**self._http.headers, "Accept": "text/event-stream"}
            if cursor is not None:
                headers["Last-Event-ID"] = str(cursor)
            try:
                async with self._http.session.get(
                    url, params={"consumer": consumer}, headers=headers, timeout=timeout
                ) as response:
                    if response.status != 200:
                        text = await response.text()
                        if response.status not in (502, 503, 504):
                            raise error_of(response.status, response.reason, text, "GET", url)
                        raise aiohttp.ClientConnectionError(f"{response.status} {text[:200]}")
                    parser = EventParser()
                    async for chunk in response.content.iter_any():
                        for event in parser.feed(chunk):
                            if event.event == "end":
                                return
                            if event.event != "group":
                                continue
                            backoff.reset()
                            group = DeliveredGroup.model_validate_json(event.data)
                            yield group
                            cursor = group.cursor
                            if ack:
                                await self.ack(job_id, group.cursor, consumer)
                reason = "the stream closed before the job ended"
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
                reason = f"stream interrupted: {exc!r}"
            await backoff.wait(reason, "GET", url)

    async def publish_version(self, version: str) -> None:
        """Tell the server the trainer's current policy version."""
        await self._http.request("PUT", "/v1/policy-version", body={"version": version})

    async def tasks(self) -> list[TaskInfo]:
        answer = await self._http.request("GET", "/v1/tasks")
        return [TaskInfo.model_validate(task) for task in answer["tasks"]]

    async def healthy(self) -> bool:
        """True when ``/healthz`` answers (one try, no retries)."""
        try:
            async with self._http.session.get(
                self._http.url("/healthz"), timeout=aiohttp.ClientTimeout(total=5)
            ) as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False


def request_body(request: JobRequest) -> dict[str, Any]:
    """The request as JSON, API keys included (the wire models hide them when serialized)."""
    body = request.model_dump(mode="json", exclude_none=True)
    policy = request.policy
    if policy.api_key is not None:
        body["policy"]["api_key"] = policy.api_key.get_secret_value()
    for index, endpoint in enumerate(policy.endpoints):
        if endpoint.api_key is not None:
            body["policy"]["endpoints"][index]["api_key"] = endpoint.api_key.get_secret_value()
    return body
