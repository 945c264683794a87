"""The ``text/event-stream`` variant of the groups route: completed groups pushed as they land.

Each group is one ``event: group`` whose ``id`` is its cursor and whose ``data`` is the group's
JSON (the same object as in a ``GroupPage``), so a reconnecting ``EventSource`` resumes with
``Last-Event-ID`` exactly where it stopped. A comment line (``: keepalive``) is sent whenever
nothing arrived for a while, to keep proxies from closing the connection. When the job has ended
and every group was sent, one ``event: end`` carries the job's final view and the stream closes:
right after the page that the store read with the job's end (``RawGroupPage.ended``), or
after an empty poll that began once the job had ended.
The stream itself never acknowledges: a consumer acks with ``POST .../ack`` as for long-polling.
The next page is read from the store while a page's events are being sent (the store's thread
and the socket side by side); it is the same poll the loop would make next, made earlier, so
it changes nothing of what is sent.
With ``Accept: text/event-stream; arrays=packed`` each ``data`` is the packed group JSON
(envfarm.api.encodings); with ``Accept-Encoding`` the stream is compressed, flushed per event.

A store that fails for a while (PostgreSQL restarting) cannot be answered with a problem once
the stream has begun: the stream sends ``: store unavailable`` and ends cleanly, and the
client reconnects from the last cursor it got (``Last-Event-ID``), as after a server restart.
Any other failure still propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator

from envfarm.api.encodings import Compressor, group_parts
from envfarm.api.service import JobService
from envfarm.errors import EnvfarmError
from envfarm.models.jobs import TERMINAL_STATUSES, RawGroupPage

log = logging.getLogger(__name__)
SSE_MEDIA_TYPE = "text/event-stream"
RETRY_MS = 2000
FIRST_PAGE = 4
"""Groups the first poll reads: their events go out while the next, full page is read, rather
than after a whole page's read."""


async def group_events(
    service: JobService,
    job_id: str,
    *,
    after: int | None,
    consumer: str,
    limit: int,
    keepalive_s: float,
    packed: bool = False,
    compressor: Compressor | None = None,
) -> AsyncIterator[bytes]:
    squeeze = compressor or Compressor(None)
    events = _events(service, job_id, after, consumer, limit, keepalive_s, packed)
    try:
        async with contextlib.aclosing(events):  # closed with the response: its poll too
            async for text in events:
                yield squeeze.chunk(text)
    except EnvfarmError as exc:
        if not exc.retryable:
            raise
        log.warning("group stream of job %s ended early: %s (the client reconnects)", job_id, exc)
        yield squeeze.chunk(b": store unavailable\n\n")
    yield squeeze.end()


async def _events(
    service: JobService,
    job_id: str,
    after: int | None,
    consumer: str,
    limit: int,
    keepalive_s: float,
    packed: bool,
) -> AsyncGenerator[bytes, None]:
    def poll(cursor: int | None, wait_s: float, size: int = limit) -> asyncio.Task[RawGroupPage]:
        return asyncio.ensure_future(service.groups(
            job_id, after=cursor, limit=size, wait_s=wait_s, consumer=consumer, packed=packed
        ))  # fmt: skip

    cursor = after
    yield f"retry: {RETRY_MS}\n\n".encode()
    wait_s = keepalive_s
    ahead: asyncio.Task[RawGroupPage] | None = poll(cursor, wait_s, min(limit, FIRST_PAGE))
    try:
        while True:
            view = await service.job(job_id) if wait_s == 0 else None
            page = await (ahead or poll(cursor, wait_s))
            ahead = None
            if page.groups and not page.ended:  # the next poll reads while this page is sent
                ahead = poll(page.groups[-1].cursor, keepalive_s)
            for group in page.groups:
                event = b"id: %d\nevent: group\ndata: " % group.cursor
                yield b"".join([event, *group_parts(group, packed), b"\n\n"])
                cursor = group.cursor
            if page.ended:  # the job had ended when this page was read, with its last group
                view = await service.job(job_id)
                yield f"event: end\ndata: {view.model_dump_json()}\n\n".encode()
                return
            if page.groups:
                wait_s = keepalive_s
                continue
            if view is not None and view.status in TERMINAL_STATUSES:
                # The job had ended before the poll began, so the poll saw its last group.
                yield f"event: end\ndata: {view.model_dump_json()}\n\n".encode()
                return
            if view is not None:
                yield b": keepalive\n\n"
            wait_s = 0 if view is None else keepalive_s
    finally:
        if ahead is not None:  # the client went away, or a page failed: nothing waits for it
            ahead.cancel()
            await asyncio.wait([ahead])
            if not ahead.cancelled():
                ahead.exception()  # retrieved: this stream has ended either way
