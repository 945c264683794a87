"""One HTTP exchange with the server, retried through outages.

A trainer runs for days and the controller may restart under it, so requests that are safe to
repeat are retried on connection errors, timeouts and 502/503/504, with capped exponential
backoff and jitter, for up to ``retry_for_s`` seconds (None: forever). A request that is not
safe to repeat (submitting a job) is retried only when the connection was never made, so a
job is never submitted twice. Error answers become ``ApiError`` with the server's problem.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import random
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from envfarm.client.chunks import Chunks
from envfarm.client.errors import ApiConnectionError, ApiError

try:
    import orjson

    loads: Callable[[str | bytes], Any] = orjson.loads
except ImportError:  # pragma: no cover - the fallback when orjson is not installed
    loads = json.loads

RETRY_STATUSES = frozenset({502, 503, 504})
NEXT_CURSOR = "Envfarm-Next-Cursor"
GROUP_SPANS = "Envfarm-Group-Spans"
JOB_ENDED = "Envfarm-Job-Ended"
BACKOFF_FIRST_S = 0.2
BACKOFF_MAX_S = 5.0


@dataclass(frozen=True)
class Raw:
    media_type: str
    body: bytes | Chunks
    """``Chunks`` when the spans hold up (the groups are sliced out of it), else the bytes."""
    next_cursor: int | None = None
    """The cursor of the page's last group, from a header: the next page can be asked for
    before this one is parsed."""
    spans: tuple[tuple[int, int], ...] = ()
    """Each group's (start, end) in ``body``, from a header, when they hold up (see
    ``group_spans``); empty otherwise."""
    ended: bool = False
    """The job had ended when the page was read and no group comes after it (a header)."""


def group_spans(header: str, body: bytes | Chunks) -> tuple[tuple[int, int], ...]:
    """The ``Envfarm-Group-Spans`` of a JSON page, checked against the body: ascending,
    inside it, each from a ``{`` to a ``}`` and separated by commas. Anything else (a proxy
    that rewrote the body, an older server) gives none, and the page is parsed whole."""
    spans: list[tuple[int, int]] = []
    end = 0
    try:
        for part in header.split(","):
            first, _, last = part.partition("-")
            start, stop = int(first), int(last)
            if not end < start < stop <= len(body):
                return ()
            if body[start : start + 1] != b"{" or body[stop - 1 : stop] != b"}":
                return ()
            if spans and body[end:start] != b",":
                return ()
            spans.append((start, stop))
            end = stop
    except ValueError:
        return ()
    if not spans or body[: spans[0][0]] != b'{"groups":[' or body[end : end + 2] != b"],":
        return ()
    return tuple(spans)


class Backoff:
    """Delays for successive retries, and whether the budget allows another one."""

    def __init__(self, retry_for_s: float | None) -> None:
        self.retry_for_s = retry_for_s
        self.reset()

    def reset(self) -> None:
        self.failures = 0
        self.first_failure: float | None = None

    async def wait(self, reason: str, method: str, url: str) -> None:
        now = time.monotonic()
        if self.first_failure is None:
            self.first_failure = now
        elapsed = now - self.first_failure
        if self.retry_for_s is not None and elapsed >= self.retry_for_s:
            raise ApiConnectionError(method, url, f"{reason} (retried for {elapsed:.0f} s)")
        delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2**self.failures)
        self.failures += 1
        await asyncio.sleep(delay * random.uniform(0.5, 1.0))


class Transport:
    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        timeout_s: float,
        retry_for_s: float | None,
        session: aiohttp.ClientSession | None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout_s = timeout_s
        self.retry_for_s = retry_for_s
        self._session = session
        self._owns_session = session is None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    def url(self, path: str) -> str:
        return self.base_url + path

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str | int | float] | None = None,
        extra_timeout_s: float = 0.0,
        idempotent: bool = True,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """The decoded JSON answer (None for 204)."""

        async def answer(response: aiohttp.ClientResponse) -> Any:
            return await decode(response, method, self.url(path))

        return await self.exchange(
            method, path, answer, body=body, params=params,
            extra_timeout_s=extra_timeout_s, idempotent=idempotent, headers=headers,
        )  # fmt: skip

    async def raw(
        self,
        path: str,
        *,
        accept: str,
        accept_encoding: str | None,
        params: Mapping[str, str | int | float] | None = None,
        extra_timeout_s: float = 0.0,
        on_next_cursor: Callable[[int], None] | None = None,
    ) -> Raw:
        """A GET answered in a negotiated form: its media type, its decompressed body and
        the ``Envfarm-Next-Cursor`` header of a groups page (also given to
        ``on_next_cursor`` as soon as the headers arrive, before the body is read)."""
        url = self.url(path)
        headers = {"Accept": accept}
        if accept_encoding:
            headers["Accept-Encoding"] = accept_encoding

        async def answer(response: aiohttp.ClientResponse) -> Raw:
            following = response.headers.get(NEXT_CURSOR, "")
            next_cursor = int(following) if following.isdigit() else None
            ok = 200 <= response.status < 300
            ended = ok and response.headers.get(JOB_ENDED, "").lower() == "true"
            if ok and next_cursor is not None and on_next_cursor is not None and not ended:
                on_next_cursor(next_cursor)
            encoding = response.headers.get("Content-Encoding")
            named_spans = response.headers.get(GROUP_SPANS, "")
            if ok and named_spans and encoding in (None, "", "identity"):
                chunks = Chunks([chunk async for chunk in response.content.iter_any()])
                spans = group_spans(named_spans, chunks)
                body: bytes | Chunks = chunks if spans else bytes(chunks)
                return Raw(response.headers.get("Content-Type", ""), body, next_cursor, spans,
                           ended)  # fmt: skip
            data = await response.read()
            if not ok:
                text = decompress(data, encoding)
                raise error_of(response.status, response.reason, text.decode(), "GET", url)
            whole = decompress(data, encoding)
            spans = group_spans(named_spans, whole)
            return Raw(response.headers.get("Content-Type", ""), whole, next_cursor, spans, ended)

        return await self.exchange(  # type: ignore[no-any-return]
            "GET", path, answer, params=params, extra_timeout_s=extra_timeout_s,
            headers=headers, auto_decompress=False,
        )  # fmt: skip

    async def exchange(
        self,
        method: str,
        path: str,
        answer: Any,
        *,
        body: Any = None,
        params: Mapping[str, str | int | float] | None = None,
        extra_timeout_s: float = 0.0,
        idempotent: bool = True,
        headers: Mapping[str, str] | None = None,
        auto_decompress: bool = True,
    ) -> Any:
        url = self.url(path)
        all_headers = {**self.headers, **(headers or {})}
        backoff = Backoff(self.retry_for_s)
        timeout = aiohttp.ClientTimeout(total=self.timeout_s + extra_timeout_s)
        while True:
            try:
                async with self.session.request(
                    method, url, json=body, params=params, headers=all_headers, timeout=timeout,
                    auto_decompress=auto_decompress,
                ) as response:  # fmt: skip
                    if response.status in RETRY_STATUSES and idempotent:
                        reason = f"{response.status} {response.reason}"
                    else:
                        return await answer(response)
            except aiohttp.ClientConnectorError as exc:
                reason = f"cannot connect: {exc}"
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
                if not idempotent:
                    raise ApiConnectionError(
                        method, url, f"connection lost, outcome unknown: {exc!r}"
                    ) from exc
                reason = f"connection lost: {exc!r}"
            await backoff.wait(reason, method, url)


async def decode(response: aiohttp.ClientResponse, method: str, url: str) -> Any:
    if response.status == 204:
        return None
    body = await response.read()
    if 200 <= response.status < 300:
        return loads(body) if body else None
    raise error_of(response.status, response.reason, body.decode(errors="replace"), method, url)


def decompress(data: bytes, content_encoding: str | None) -> bytes:
    if not content_encoding or content_encoding == "identity":
        return data
    return Decompressor(content_encoding).feed(data)


class Decompressor:
    """Incremental ``Content-Encoding`` decoding (gzip; zstd with the zstandard package)."""

    def __init__(self, content_encoding: str | None) -> None:
        self._feed: Any = None
        if content_encoding == "gzip":
            self._feed = zlib.decompressobj(47).decompress
        elif content_encoding == "zstd":
            import zstandard  # only offered when installed (accept_encodings())

            self._feed = zstandard.ZstdDecompressor().decompressobj().decompress
        elif content_encoding not in (None, "", "identity"):
            raise ApiConnectionError("GET", "", f"unknown Content-Encoding {content_encoding!r}")

    def feed(self, data: bytes) -> bytes:
        return bytes(self._feed(data)) if self._feed is not None else data


def accept_encodings(compression: str | None) -> str:
    """The ``Accept-Encoding`` to send for ``compression`` (None, "gzip", "zstd"). None asks
    for ``identity``: compressing megabytes of token ids costs the server more CPU than it saves
    on a fast network (bench/RESULTS.md), so it is opt-in rather than aiohttp's default."""
    if compression is None:
        return "identity"
    if compression == "zstd" and importlib.util.find_spec("zstandard") is None:
        return "gzip"
    return compression


def error_of(status: int, reason: str | None, text: str, method: str, url: str) -> ApiError:
    try:
        problem = json.loads(text)
    except ValueError:
        problem = None
    if not isinstance(problem, dict):
        problem = {"status": status, "title": reason or "error", "detail": text[:500] or None}
    return ApiError(status, problem, method, url)
