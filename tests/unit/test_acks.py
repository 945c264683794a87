"""The background acknowledger stops when closed, whenever the close lands."""

from __future__ import annotations

import asyncio

import pytest

from envfarm.client.acks import BackgroundAcker


@pytest.mark.parametrize("turns", range(8))
async def test_close_ends_the_timer_even_as_it_wakes(turns: int) -> None:
    """``close()`` lands ``turns`` loop turns after a wake-up: whichever step of waking the
    timer is in (on Python 3.11 ``wait_for`` could swallow a cancel that arrived as its event
    was set, and the timer then ran forever under a close that waited for it)."""
    sent: list[int] = []

    async def send(cursor: int) -> None:
        sent.append(cursor)

    acker = BackgroundAcker(send, every=1, interval_s=60)
    acker.finished(1)
    await asyncio.sleep(0)  # the timer starts waiting
    acker.finished(2)  # wakes it
    for _ in range(turns):
        await asyncio.sleep(0)
    closing = asyncio.ensure_future(acker.close())
    done, _ = await asyncio.wait([closing], timeout=30)  # a bound against a hang only
    assert closing in done
    closing.result()
    assert acker.acked == 2
    assert sent[-1] == 2
    assert [task for task in asyncio.all_tasks() if "BackgroundAcker" in repr(task)] == []


async def test_a_cancelled_close_is_cancelled() -> None:
    """A caller cancelled while ``close()`` waits for the timer is cancelled, not resumed."""
    started = asyncio.Event()

    async def send(cursor: int) -> None:
        started.set()
        await asyncio.sleep(3600)

    acker = BackgroundAcker(send, every=1, interval_s=60)
    acker.finished(1)
    await started.wait()  # the timer is inside a send
    closing = asyncio.ensure_future(acker.close())
    await asyncio.sleep(0)
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
