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
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, Generic, TypeVar

import aiohttp

from envfarm.client.acks import DEFAULT_EVERY, DEFAULT_INTERVAL_S, BackgroundAcker
from envfarm.client.chunks import Chunks
from envfarm.client.http import (
    Backoff,
    Decompressor,
    Raw,
    Transport,
    accept_encodings,
    error_of,
)
from envfarm.client.lazy import LazyGroup, arrow_groups, json_group, loads, ndjson_groups
from envfarm.client.pages import PagesAhead
from envfarm.client.sse import EventParser
from envfarm.models.jobs import (
    TERMINAL_STATUSES,
    DeliveredGroup,
    GroupPage,
    JobRequest,
    JobView,
    TaskInfo,
)

T = TypeVar("T")
PageFetch = Callable[[int | None, float, Callable[[int], None] | None], Awaitable[Raw]]
"""Ask for the page after a cursor (None: the consumer's acknowledged one), waiting up to a
long-poll's seconds; the callable receives the page's last cursor when its headers arrive."""
STREAM_READ_TIMEOUT_S = 90.0
SEND_YIELDS = 8
FIRST_PAGE = 4
"""Groups the first page of a long-poll asks for: the consumer parses them while the server
reads the next, full page (about 4 MB), instead of waiting for a whole page before its first
group. Which groups come is the same; only the first page is smaller."""
JSON, NDJSON = "application/json", "application/x-ndjson"
ARROW, SSE = "application/vnd.apache.arrow.stream", "text/event-stream"
ENCODINGS = {
    "json": JSON,
    "packed": f"{JSON}; arrays=packed",
    "ndjson": NDJSON,
    "ndjson-packed": f"{NDJSON}; arrays=packed",
    "arrow": ARROW,
}


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
        self._ackers: set[BackgroundAcker] = set()

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
            for acker in list(self._ackers):
                await acker.close()
        finally:
            self._ackers.clear()
            await self._http.close()

    def _acker(self, job_id: str, consumer: str, every: int, interval_s: float) -> BackgroundAcker:
        async def send(cursor: int) -> None:
            await self.ack(job_id, cursor, consumer)

        acker = BackgroundAcker(send, every=every, interval_s=interval_s)
        self._ackers.add(acker)
        return acker

    async def _release(self, acker: BackgroundAcker | None) -> None:
        if acker is not None:
            self._ackers.discard(acker)
            await acker.close()

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

        def decode(raw: Raw) -> list[DeliveredGroup] | SpannedPage[DeliveredGroup]:
            if raw.spans:
                return SpannedPage(raw.body, raw.spans, stream_group)
            return GroupPage.model_validate(loads(bytes(raw.body))).groups

        fetch = self._page_fetcher(job_id, consumer, limit, JSON, accept_encodings(compression))
        async for group in self._paged(job_id, consumer, after, ack, wait_s, fetch, decode,
                                       ack_every, ack_interval_s):  # fmt: skip
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
        fetch = self._page_fetcher(job_id, consumer, limit, ENCODINGS[encoding],
                                   accept_encodings(compression))  # fmt: skip
        async for group in self._paged(job_id, consumer, after, ack, wait_s, fetch,
                                       lambda raw: decode_groups(raw.media_type, raw.body,
                                                                 raw.spans),
                                       ack_every, ack_interval_s):  # fmt: skip
            yield group

    def _page_fetcher(
        self, job_id: str, consumer: str, limit: int, accept: str, accept_encoding: str
    ) -> PageFetch:
        path = f"/v1/jobs/{job_id}/groups"
        first = True

        async def fetch(
            cursor: int | None, wait: float, named: Callable[[int], None] | None = None
        ) -> Raw:
            nonlocal first
            size, first = min(limit, FIRST_PAGE) if first else limit, False
            params: dict[str, str | int | float] = {"limit": size, "wait": wait}
            params["consumer"] = consumer
            if cursor is not None:
                params["after"] = cursor
            return await self._http.raw(path, accept=accept, accept_encoding=accept_encoding,
                                        params=params, extra_timeout_s=wait,
                                        on_next_cursor=named)  # fmt: skip

        return fetch

    async def _paged(
        self,
        job_id: str,
        consumer: str,
        after: int | None,
        ack: bool,
        wait_s: float,
        fetch: PageFetch,
        decode: Callable[[Raw], list[Any] | SpannedPage[Any]],
        ack_every: int,
        ack_interval_s: float,
    ) -> AsyncIterator[Any]:
        """Pages one after another, each asked for as soon as the page before it names its
        last cursor (``envfarm.client.pages``), so the server reads the store while this
        process reads and parses; a JSON page whose group spans the server named is parsed a
        group at a time."""
        cursor = after
        ended = False
        acker = self._acker(job_id, consumer, ack_every, ack_interval_s) if ack else None
        ahead = PagesAhead(lambda at, named: fetch(at, 0.0, named))
        try:
            while True:
                if ahead:
                    raw = await ahead.next()
                else:
                    raw = await fetch(cursor, 0.0 if ended else wait_s, ahead.ask)
                if raw.next_cursor is not None:  # its headers asked for the next page
                    for _ in range(SEND_YIELDS):  # let the request go out before parsing
                        await asyncio.sleep(0)
                found = decode(raw)
                if found and raw.next_cursor is None and not raw.ended:  # not named: ask now
                    ahead.ask(found[-1].cursor)
                for group in found:
                    yield group
                    cursor = group.cursor
                    if acker is not None:
                        acker.finished(group.cursor)
                    await asyncio.sleep(0)  # the pages ahead read on while this one is parsed
                if raw.ended:  # the server read the job's end with this page: nothing follows
                    return
                if found:
                    continue
                if ended:
                    return
                # One more poll after the job is seen ended: groups may have landed meanwhile.
                ended = (await self.job(job_id)).status in TERMINAL_STATUSES
        finally:
            await ahead.close()
            await self._release(acker)

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
        async for group in self._events(job_id, consumer, after, ack, read_timeout_s,
                                        SSE, accept_encodings(compression), stream_group,
                                        ack_every, ack_interval_s):  # fmt: skip
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
        async for group in self._events(job_id, consumer, after, ack, read_timeout_s, accept,
                                        accept_encodings(compression), json_group,
                                        ack_every, ack_interval_s):  # fmt: skip
            yield group

    async def _events(
        self,
        job_id: str,
        consumer: str,
        after: int | None,
        ack: bool,
        read_timeout_s: float,
        accept: str,
        accept_encoding: str | None,
        parse: Any,
        ack_every: int,
        ack_interval_s: float,
    ) -> AsyncIterator[Any]:
        cursor = after
        backoff = Backoff(self._http.retry_for_s)
        url = self._http.url(f"/v1/jobs/{job_id}/groups")
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._http.timeout_s,
                                        sock_read=read_timeout_s)  # fmt: skip
        acker = self._acker(job_id, consumer, ack_every, ack_interval_s) if ack else None
        try:
            while True:
                headers = {**self._http.headers, "Accept": accept}
                if accept_encoding:
                    headers["Accept-Encoding"] = accept_encoding
                if cursor is not None:
                    headers["Last-Event-ID"] = str(cursor)
                try:
                    async with self._http.session.get(
                        url, params={"consumer": consumer}, headers=headers, timeout=timeout,
                        auto_decompress=False,
                    ) as response:  # fmt: skip
                        inflate = Decompressor(response.headers.get("Content-Encoding"))
                        if response.status != 200:
                            text = inflate.feed(await response.read()).decode()
                            if response.status not in (502, 503, 504):
                                raise error_of(response.status, response.reason, text, "GET", url)
                            raise aiohttp.ClientConnectionError(f"{response.status} {text[:200]}")
                        parser = EventParser()
                        async for chunk in response.content.iter_any():
                            for event in parser.feed(inflate.feed(chunk)):
                                if event.event == "end":
                                    return
                                if event.event != "group":
                                    continue
                                backoff.reset()
                                group = parse(event.data)
                                yield group
                                cursor = group.cursor
                                if acker is not None:
                                    acker.finished(group.cursor)
                                await asyncio.sleep(0)  # read on while the next is parsed
                    reason = "the stream closed before the job ended"
                except (
                    aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError,
                ) as exc:  # fmt: skip
                    reason = f"stream interrupted: {exc!r}"
                await backoff.wait(reason, "GET", url)
        finally:
            await self._release(acker)

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


def stream_group(data: bytes) -> DeliveredGroup:
    return DeliveredGroup.model_validate(loads(data))


class SpannedPage(Generic[T]):
    """A JSON page's groups, each parsed from its span of the body when it is read: parsing
    one group at a time keeps the freshly made objects few enough to stay in the CPU's
    caches, which makes it about twice as fast as parsing the whole page (bench/RESULTS.md),
    and a group the consumer has finished with is freed before the next is parsed."""

    def __init__(
        self, body: bytes | Chunks, spans: tuple[tuple[int, int], ...], parse: Callable[[bytes], T]
    ) -> None:
        self._body, self._spans, self._parse = body, spans, parse

    def __len__(self) -> int:
        return len(self._spans)

    def __getitem__(self, index: int) -> T:
        start, end = self._spans[index]
        return self._parse(self._body[start:end])

    def __iter__(self) -> Iterator[T]:
        for index in range(len(self._spans)):
            yield self[index]


def decode_groups(media_type: str, body: bytes | Chunks, spans: tuple[tuple[int, int], ...] = ()
                  ) -> list[LazyGroup] | SpannedPage[LazyGroup]:  # fmt: skip
    """The groups of one answer in the form the server chose."""
    kind = media_type.split(";")[0].strip().lower()
    if kind == JSON and spans:
        return SpannedPage(body, spans, json_group)
    data = bytes(body)
    if kind == ARROW:
        return arrow_groups(data) if data else []
    if kind == NDJSON:
        return list(ndjson_groups(iter(data.split(b"\n"))))
    return [json_group(group) for group in json_group_list(data)]


def json_group_list(body: bytes) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = loads(body)["groups"]
    return groups
