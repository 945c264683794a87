"""The Docker calls of compose environments: on a thread pool of their own, each run to its end
even when the episode is cancelled.

Dozens of environments start at once, each making a network, volumes, sidecars and probes: on a
dedicated pool they do not starve the default executor the rest of the process uses. A call that
creates something (a network, a sidecar) must not be abandoned half-way by a cancellation, or
the teardown that follows would not know what to remove: ``blocking`` awaits it to its end, then
raises the cancellation.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

THREADS = 32

_T = TypeVar("_T")
_executor = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="envfarm-environment")


async def uncancelled(future: asyncio.Future[_T]) -> _T:
    """Await ``future`` to its end even when cancelled (however often), then raise the
    cancellation: whatever the call creates exists before the teardown that follows, so the
    teardown removes it."""
    cancelled = False
    while not future.done():
        try:
            await asyncio.wait([future])
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return future.result()


async def blocking(function: Callable[..., _T], *args: object) -> _T:
    """Run a blocking docker call on the environment pool, to its end even when cancelled."""
    loop = asyncio.get_running_loop()
    return await uncancelled(loop.run_in_executor(_executor, functools.partial(function, *args)))


async def all_or_nothing(coroutines: list[Coroutine[Any, Any, None]]) -> None:
    """Run concurrently; on the first failure cancel the rest and raise that failure."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
