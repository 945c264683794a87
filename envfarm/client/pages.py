"""Pages of a long-poll asked for ahead of the consumer, a page's request sent as soon as the
page before it names its last cursor.

The server names a page's last group in a header (``Envfarm-Next-Cursor``), which arrives
before the page's megabytes do. Asking for the next page then, rather than once this page is
read, keeps the server reading the store while this page crosses the wire and is parsed, so
the consumer finds the next page waiting. At most ``depth`` requests are out at once: a slow
consumer holds that many pages and no more.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable

from envfarm.client.http import Raw

DEPTH = 2

Fetch = Callable[[int, Callable[[int], None]], Awaitable[Raw]]
"""Ask for the page after a cursor; the callable it is given receives the page's last cursor
when its headers arrive."""


class PagesAhead:
    def __init__(self, fetch: Fetch, depth: int = DEPTH) -> None:
        self._fetch, self._depth = fetch, depth
        self._pending: deque[asyncio.Future[Raw]] = deque()
        self._asked: int | None = None
        self._named: int | None = None
        """A cursor named while ``depth`` requests were out: asked for when one is taken."""

    def __bool__(self) -> bool:
        return bool(self._pending)

    def ask(self, cursor: int) -> None:
        """Ask for the page after ``cursor``, unless it (or a later one) was asked for."""
        if self._asked is not None and cursor <= self._asked:
            return
        if len(self._pending) >= self._depth:
            self._named = max(cursor, self._named or cursor)
            return
        self._asked = cursor
        self._pending.append(asyncio.ensure_future(self._fetch(cursor, self.ask)))

    async def next(self) -> Raw:
        """The oldest page asked for."""
        raw = await self._pending.popleft()
        if self._named is not None:
            named, self._named = self._named, None
            self.ask(named)
        return raw

    async def close(self) -> None:
        while self._pending:
            pending = self._pending.popleft()
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
