"""Pages asked for ahead: each as soon as the page before names its cursor, never more than
``depth`` out at once, in order, and none left running after close."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from envfarm.client.http import Raw
from envfarm.client.pages import PagesAhead

PAGE = 10


class Server:
    """Answers the page after a cursor; its headers name the page's last cursor at once, its
    body arrives when the test lets it."""

    def __init__(self) -> None:
        self.asked: list[int] = []
        self.out = 0
        self.most_out = 0
        self.release = asyncio.Event()

    async def fetch(self, cursor: int, named: Callable[[int], None]) -> Raw:
        self.asked.append(cursor)
        self.out += 1
        self.most_out = max(self.most_out, self.out)
        try:
            await asyncio.sleep(0)
            named(cursor + PAGE)
            await self.release.wait()
            return Raw("application/json", b"{}", next_cursor=cursor + PAGE)
        finally:
            self.out -= 1


async def test_a_slow_consumer_holds_depth_requests_then_each_taken_page_asks_the_next() -> None:
    server = Server()
    pages = PagesAhead(server.fetch, depth=2)
    pages.ask(0)
    for _ in range(10):
        await asyncio.sleep(0)
    assert server.asked == [0, 10]  # the headers of page 0 asked for the next; then full
    assert server.most_out == 2
    server.release.set()
    taken = [(await pages.next()).next_cursor for _ in range(4)]
    assert taken == [10, 20, 30, 40]
    assert server.asked[:5] == [0, 10, 20, 30, 40]
    assert server.most_out == 2
    pages.ask(20)  # already asked for: ignored
    assert server.asked.count(20) == 1
    await pages.close()
    assert not pages
    assert server.out == 0
