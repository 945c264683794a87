"""The trainer's side of the REST API: submit jobs, consume graded groups, publish versions.

``groups()`` (long-poll) and ``stream()`` (server-sent events) yield each completed group in
cursor order and, with ``ack=True``, acknowledge it once the consumer's loop body has finished
with it (when the loop asks for the next group), so a group the trainer did not finish is
delivered again after a crash. Both survive server restarts: they retry through the outage and
continue after the last group they yielded. docs/api.md has the exactly-once recipe.

Acknowledgements go in the background (``envfarm.client.acks``): one request per ``ack_every``
finished groups or ``ack_interval_s`` seconds, flushed when the loop ends and when the client
closes. ``lazy_groups()`` and ``lazy_stream()`` ask for a compact form (packed arrays, NDJSON,
Arrow; optionally compressed) and yield ``LazyGroup``s that parse only what is read.

This module is the client's face: its job calls, and the delivery calls that start a loop. The
loops are ``envfarm.client.longpoll`` and ``envfarm.client.stream``, the forms they decode
``envfarm.client.encodings``, and every HTTP exchange ``envfarm.client.http``'s.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any

import aiohttp

from envfarm.client.acks import DEFAULT_EVERY, DEFAULT_INTERVAL_S, Ackers, AckPlan
from envfarm.client.encodings import (
    ENCODINGS,
    JSON,
    SSE,
    decode_lazy,
    decode_models,
    stream_group,
)
from envfarm.client.http import Transport, accept_encodings
from envfarm.client.lazy import LazyGroup, json_group
from envfarm.client.longpoll import long_poll, page_fetcher
from envfarm.client.stream import STREAM_READ_TIMEOUT_S, event_stream
from envfarm.models.jobs import (
    TERMINAL_STATUSES,
    DeliveredGroup,
    GroupPage,
    JobRequest,
    JobView,
    TaskInfo,
)


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
        self._ackers = Ackers(self.ack)

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
        """Flush pending acknowledgements, then close the connection pool."""
        try:
            await self._ackers.close()
        finally:
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
        compression: str | None = None,
    ) -> GroupPage:
        """One long-poll: up to ``limit`` groups after ``after`` (default: the consumer's
        last acknowledged cursor), waiting up to ``wait_s`` for a first one. ``compression``:
        None (the default), "gzip" or "zstd"."""
        params: dict[str, str | int | float] = {"limit": limit, "wait": wait_s}
        params["consumer"] = consumer
        if after is not None:
            params["after"] = after
        headers = {"Accept-Encoding": accept_encodings(compression)}
        answer = await self._http.request(
            "GET", f"/v1/jobs/{job_id}/groups", params=params, extra_timeout_s=wait_s,
            headers=headers,
        )  # fmt: skip
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
        ack_every: int = DEFAULT_EVERY,
        ack_interval_s: float = DEFAULT_INTERVAL_S,
        compression: str | None = None,
    ) -> AsyncIterator[DeliveredGroup]:
        """Every group of the job from ``after`` (default: the consumer's acknowledged
        cursor) until the job has ended and its last group was yielded."""
        fetch = page_fetcher(self._http, job_id, consumer, limit, JSON,
                             accept_encodings(compression))  # fmt: skip
        async for group in long_poll(fetch, decode_models, after=after, wait_s=wait_s,
                                     job_ended=functools.partial(self._has_ended, job_id),
                                     ackers=self._ackers,
                                     acks=_ack_plan(job_id, consumer, ack, ack_every,
                                                    ack_interval_s)):  # fmt: skip
            yield group

    async def lazy_groups(
        self,
        job_id: str,
        *,
        encoding: str = "packed",
        compression: str | None = None,
        consumer: str = "default",
        after: int | None = None,
        ack: bool = True,
        wait_s: float = 30.0,
        limit: int = 100,
        ack_every: int = DEFAULT_EVERY,
        ack_interval_s: float = DEFAULT_INTERVAL_S,
    ) -> AsyncIterator[LazyGroup]:
        """Like ``groups()`` in a compact form: ``encoding`` is one of ``ENCODINGS`` (packed
        JSON by default: the fastest to read, bench/RESULTS.md), ``compression`` None, "gzip"
        or "zstd" (gzip when zstandard is missing)."""
        if encoding not in ENCODINGS:
            raise ValueError(f"encoding {encoding!r}: expected one of {', '.join(ENCODINGS)}")
        fetch = page_fetcher(self._http, job_id, consumer, limit, ENCODINGS[encoding],
                             accept_encodings(compression))  # fmt: skip
        async for group in long_poll(fetch, decode_lazy, after=after, wait_s=wait_s,
                                     job_ended=functools.partial(self._has_ended, job_id),
                                     ackers=self._ackers,
                                     acks=_ack_plan(job_id, consumer, ack, ack_every,
                                                    ack_interval_s)):  # fmt: skip
            yield group

    async def _has_ended(self, job_id: str) -> bool:
        return (await self.job(job_id)).status in TERMINAL_STATUSES

    async def stream(
        self,
        job_id: str,
        *,
        consumer: str = "default",
        after: int | None = None,
        ack: bool = True,
        read_timeout_s: float = STREAM_READ_TIMEOUT_S,
        ack_every: int = DEFAULT_EVERY,
        ack_interval_s: float = DEFAULT_INTERVAL_S,
        compression: str | None = None,
    ) -> AsyncIterator[DeliveredGroup]:
        """Like ``groups()``, pushed by the server as server-sent events."""
        async for group in event_stream(self._http, job_id, consumer=consumer, after=after,
                                        read_timeout_s=read_timeout_s, accept=SSE,
                                        accept_encoding=accept_encodings(compression),
                                        parse=stream_group, ackers=self._ackers,
                                        acks=_ack_plan(job_id, consumer, ack, ack_every,
                                                       ack_interval_s)):  # fmt: skip
            yield group

    async def lazy_stream(
        self,
        job_id: str,
        *,
        packed: bool = True,
        compression: str | None = None,
        consumer: str = "default",
        after: int | None = None,
        ack: bool = True,
        read_timeout_s: float = STREAM_READ_TIMEOUT_S,
        ack_every: int = DEFAULT_EVERY,
        ack_interval_s: float = DEFAULT_INTERVAL_S,
    ) -> AsyncIterator[LazyGroup]:
        """Like ``stream()``, with packed token arrays and optional compression."""
        accept = f"{SSE}; arrays=packed" if packed else SSE
        async for group in event_stream(self._http, job_id, consumer=consumer, after=after,
                                        read_timeout_s=read_timeout_s, accept=accept,
                                        accept_encoding=accept_encodings(compression),
                                        parse=json_group, ackers=self._ackers,
                                        acks=_ack_plan(job_id, consumer, ack, ack_every,
                                                       ack_interval_s)):  # fmt: skip
            yield group

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


def _ack_plan(
    job_id: str, consumer: str, ack: bool, every: int, interval_s: float
) -> AckPlan | None:
    return AckPlan(job_id, consumer, every, interval_s) if ack else None
