"""Delivery by long-poll: pages of groups one after another until the job's last group.

Each page is asked for as soon as the page before it names its last cursor
(``envfarm.client.pages``), so the server reads the store while this process reads and parses.
The first page is small (``FIRST_PAGE``), so the consumer starts on its first groups while the
server reads the next, full page. A page read after the job ended says so, and nothing follows
it; otherwise an empty page after the job was seen ended is polled once more, since groups may
have landed meanwhile. Each group yielded is marked finished (acknowledged in the background,
``envfarm.client.acks``) when the loop asks for the next.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from envfarm.client.acks import Ackers, AckPlan
from envfarm.client.encodings import SpannedPage
from envfarm.client.http import Raw, Transport
from envfarm.client.pages import PagesAhead

PageFetch = Callable[[int | None, float, Callable[[int], None] | None], Awaitable[Raw]]
"""Ask for the page after a cursor (None: the consumer's acknowledged one), waiting up to a
long-poll's seconds; the callable receives the page's last cursor when its headers arrive."""
SEND_YIELDS = 8
FIRST_PAGE = 4
"""Groups the first page of a long-poll asks for: the consumer parses them while the server
reads the next, full page (about 4 MB), instead of waiting for a whole page before its first
group. Which groups come is the same; only the first page is smaller."""


def page_fetcher(
    http: Transport, job_id: str, consumer: str, limit: int, accept: str, accept_encoding: str
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
        return await http.raw(path, accept=accept, accept_encoding=accept_encoding,
                              params=params, extra_timeout_s=wait,
                              on_next_cursor=named)  # fmt: skip

    return fetch


async def long_poll(
    fetch: PageFetch,
    decode: Callable[[Raw], list[Any] | SpannedPage[Any]],
    *,
    after: int | None,
    wait_s: float,
    job_ended: Callable[[], Awaitable[bool]],
    ackers: Ackers,
    acks: AckPlan | None,
) -> AsyncIterator[Any]:
    """Every group after ``after`` until the job has ended and its last group was yielded; a
    JSON page whose group spans the server named is parsed a group at a time. ``acks``: what
    to acknowledge (None: nothing)."""
    cursor = after
    ended = False
    acker = ackers.open(acks) if acks is not None else None
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
            ended = await job_ended()
    finally:
        await ahead.close()
        await ackers.release(acker)
