"""Delivery over server-sent events: the server pushes each group as it completes.

One request stays open; each ``group`` event is parsed and yielded, and an ``end`` event ends
the loop (the job has ended and its last group was sent). A stream that breaks or closes early
is opened again, after a backoff, with ``Last-Event-ID`` set to the last group yielded, so the
loop continues where it was through server restarts, for up to the client's ``retry_for_s``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp

from envfarm.client.acks import Ackers, AckPlan
from envfarm.client.http import Backoff, Decompressor, Transport, error_of
from envfarm.client.sse import EventParser

STREAM_READ_TIMEOUT_S = 90.0


async def event_stream(
    http: Transport,
    job_id: str,
    *,
    consumer: str,
    after: int | None,
    read_timeout_s: float,
    accept: str,
    accept_encoding: str | None,
    parse: Callable[[bytes], Any],
    ackers: Ackers,
    acks: AckPlan | None,
) -> AsyncIterator[Any]:
    cursor = after
    backoff = Backoff(http.retry_for_s)
    url = http.url(f"/v1/jobs/{job_id}/groups")
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=http.timeout_s,
                                    sock_read=read_timeout_s)  # fmt: skip
    acker = ackers.open(acks) if acks is not None else None
    try:
        while True:
            headers = {**http.headers, "Accept": accept}
            if accept_encoding:
                headers["Accept-Encoding"] = accept_encoding
            if cursor is not None:
                headers["Last-Event-ID"] = str(cursor)
            try:
                async with http.session.get(
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
        await ackers.release(acker)
