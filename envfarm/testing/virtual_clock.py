"""An asyncio event loop on simulated time, for simulations of the controller at scale.

``loop.time()`` is a virtual clock that starts at 0. When nothing is ready to run, the loop does
not wait: it moves the clock to the next scheduled timer at once, so ``asyncio.sleep(3600)``
costs no real time and a simulation runs as fast as its own work allows, whatever else the
machine is doing. Sockets still work (they are polled, never waited on), but a simulation that
waits on real I/O with nothing scheduled would spin: use it for sleeps, events, queues and
locks. ``run(main())`` runs a coroutine on a fresh loop of this kind.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _Selector(selectors.DefaultSelector):
    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualClockLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if not ready and timeout is not None and timeout > 0 and self.loop is not None:
            self.loop.advance(timeout)
        return ready


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        selector = _Selector()
        super().__init__(selector)
        selector.loop = self
        self._now = 0.0

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds


def run(main: Coroutine[Any, Any, T]) -> T:
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(main)
    finally:
        loop.close()
