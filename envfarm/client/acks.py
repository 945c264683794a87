"""Acknowledging in the background: one request per ``every`` groups or ``interval_s`` seconds.

The consumer's loop marks a group finished when it asks for the next one (the group it was
given last is never marked: the loop may have stopped inside it). An acknowledgement covers the
newest finished cursor and everything before it, so the contract holds with fewer requests:
no group is acknowledged before the consumer finished with it, and none is delivered again
after its acknowledgement was answered. ``close()`` flushes: the client calls it when the loop
ends (the job ended, the loop broke out, or an error escaped) and when the client closes
(``Ackers`` keeps the client's open ones).

The timer waits with ``asyncio.timeout``, not ``asyncio.wait_for``: on Python 3.11 a cancel that
arrived as ``wait_for``'s event was set could be swallowed, and the timer then ran on forever
under a ``close()`` that waited for it (a consumer hung at the end of about one job in 70).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

DEFAULT_EVERY = 64
DEFAULT_INTERVAL_S = 0.25


class BackgroundAcker:
    def __init__(
        self,
        send: Callable[[int], Awaitable[None]],
        *,
        every: int = DEFAULT_EVERY,
        interval_s: float = DEFAULT_INTERVAL_S,
    ) -> None:
        self._send = send
        self._every = max(1, every)
        self._interval_s = interval_s
        self._finished: int | None = None
        self._acked: int | None = None
        self._since_flush = 0
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None

    @property
    def acked(self) -> int | None:
        """The newest cursor whose acknowledgement the server answered."""
        return self._acked

    def finished(self, cursor: int) -> None:
        """The consumer is done with the group of this cursor (and every earlier one)."""
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        self._finished = cursor
        self._since_flush += 1
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        if self._since_flush >= self._every:
            self._wake.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval_s):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self.flush()
            except Exception as exc:  # raised in the consumer's loop at its next group
                self._error = exc

    async def flush(self) -> None:
        async with self._lock:
            cursor = self._finished
            if cursor is None or (self._acked is not None and cursor <= self._acked):
                return
            self._since_flush = 0
            await self._send(cursor)
            self._acked = cursor

    async def close(self) -> None:
        """Stop the timer and acknowledge whatever was finished."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                if (current := asyncio.current_task()) and current.cancelling():
                    raise  # the caller was cancelled too, not only the timer
            self._task = None
        await self.flush()
        if self._error is not None:
            error, self._error = self._error, None
            raise error


@dataclass(frozen=True)
class AckPlan:
    """What a delivery loop acknowledges, and how often: its job's groups for its consumer,
    one request per ``every`` finished groups or ``interval_s`` seconds."""

    job_id: str
    consumer: str
    every: int
    interval_s: float


class Ackers:
    """A client's background ackers, one per delivery loop that acknowledges: ``close()``
    flushes those whose loop has not ended, when the client closes."""

    def __init__(self, send: Callable[[str, int, str], Awaitable[None]]) -> None:
        self._send = send
        """Acknowledge a job's cursor for a consumer (the client's ``ack``)."""
        self._open: set[BackgroundAcker] = set()

    def open(self, plan: AckPlan) -> BackgroundAcker:
        async def send(cursor: int) -> None:
            await self._send(plan.job_id, cursor, plan.consumer)

        acker = BackgroundAcker(send, every=plan.every, interval_s=plan.interval_s)
        self._open.add(acker)
        return acker

    async def release(self, acker: BackgroundAcker | None) -> None:
        """Flush a loop's acker as its loop ends."""
        if acker is not None:
            self._open.discard(acker)
            await acker.close()

    async def close(self) -> None:
        try:
            for acker in list(self._open):
                await acker.close()
        finally:
            self._open.clear()
