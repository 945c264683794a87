"""Recording episode results in batches: one store transaction for every result that is ready.

At thousands of sessions per controller, one transaction per finished episode makes the store
the bottleneck: each is a trip to the store's thread, a commit, and (the larger cost with one
busy event loop) the thread waiting for the interpreter lock between statements. Results are
queued instead; while one batch is being written the next one gathers, and each is written in
one transaction with a savepoint per result (``Store.record_many``), so a result that fails
fails alone. Nothing waits on a timer: a result alone is written at once, and the batch size
adapts to the store's speed (group commit).
"""

from __future__ import annotations

import asyncio
import contextlib

from envfarm.errors import EnvfarmError
from envfarm.models.trajectory import Trajectory
from envfarm.store.results import Recorded
from envfarm.store.store import Store

MAX_BATCH = 256


class RecordBatcher:
    def __init__(self, store: Store, worker: str, *, max_batch: int = MAX_BATCH) -> None:
        self._store = store
        self._worker = worker
        self._max_batch = max_batch
        self._pending: list[tuple[Trajectory, bool, asyncio.Future[Recorded]]] = []
        self._writer: asyncio.Task[None] | None = None
        self.batches = 0
        self.results = 0

    async def record(self, trajectory: Trajectory, final: bool) -> Recorded:
        """Record one result (raises the store's error for it, as ``Store.record`` does)."""
        future: asyncio.Future[Recorded] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_retrieved)
        self._pending.append((trajectory, final, future))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write())
        # The write goes on when the waiting episode is cancelled: its result is recorded.
        return await asyncio.shield(future)

    async def _write(self) -> None:
        while self._pending:
            batch = self._pending[: self._max_batch]
            del self._pending[: self._max_batch]
            try:
                answers = await self._store.record_many(
                    self._worker, [(trajectory, final) for trajectory, final, _ in batch]
                )
            except Exception as exc:  # the whole transaction failed: every result with it
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            self.batches += 1
            self.results += len(batch)
            for (_, _, future), answer in zip(batch, answers, strict=True):
                if future.done():
                    continue
                if isinstance(answer, EnvfarmError):
                    future.set_exception(answer)
                else:
                    future.set_result(answer)

    async def close(self) -> None:
        """Wait for queued results to be written."""
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await self._writer


def _retrieved(future: asyncio.Future[Recorded]) -> None:
    """Mark the outcome seen: its episode may have been cancelled while it was written."""
    if not future.cancelled():
        future.exception()
