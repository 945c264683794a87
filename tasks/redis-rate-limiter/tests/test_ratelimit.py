"""Exercise the limiter against the real Redis sidecar (each test starts from an empty db)."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator

import pytest
import redis

sys.path.insert(0, "/app")
from ratelimit import SlidingWindowLimiter

URL = os.environ.get("REDIS_URL", "redis://cache:6379/0")


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(URL)
    connection.flushdb()
    yield connection
    connection.flushdb()
    connection.close()


def test_allows_up_to_the_limit_then_denies(client) -> None:
    limiter = SlidingWindowLimiter(client, limit=5, window_seconds=30)
    assert [limiter.allow("user-1") for _ in range(8)] == [True] * 5 + [False] * 3


def test_keys_are_independent(client) -> None:
    limiter = SlidingWindowLimiter(client, limit=2, window_seconds=30)
    assert [limiter.allow("a"), limiter.allow("a"), limiter.allow("a")] == [True, True, False]
    assert [limiter.allow("b"), limiter.allow("b"), limiter.allow("b")] == [True, True, False]


def test_remaining_counts_nothing_and_denied_requests_do_not_count(client) -> None:
    limiter = SlidingWindowLimiter(client, limit=3, window_seconds=30)
    assert limiter.remaining("k") == 3
    assert limiter.remaining("k") == 3
    limiter.allow("k")
    assert limiter.remaining("k") == 2
    for _ in range(6):
        limiter.allow("k")
    assert limiter.remaining("k") == 0


def test_the_window_slides(client) -> None:
    limiter = SlidingWindowLimiter(client, limit=3, window_seconds=2.0)
    assert [limiter.allow("s"), limiter.allow("s")] == [True, True]
    time.sleep(1.2)
    assert [limiter.allow("s"), limiter.allow("s")] == [True, False]
    time.sleep(1.2)  # the first two left the window; the third is still in it
    assert [limiter.allow("s"), limiter.allow("s"), limiter.allow("s")] == [True, True, False]
    assert limiter.remaining("s") == 0


def test_state_is_shared_between_clients(client) -> None:
    first = SlidingWindowLimiter(client, limit=4, window_seconds=30)
    other_client = redis.Redis.from_url(URL)
    second = SlidingWindowLimiter(other_client, limit=4, window_seconds=30)
    for _ in range(3):
        assert first.allow("shared")
    assert second.remaining("shared") == 1
    assert second.allow("shared")
    assert not first.allow("shared")
    other_client.close()


def test_exact_under_concurrency(client) -> None:
    allowed: list[bool] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def worker() -> None:
        own = redis.Redis.from_url(URL)
        limiter = SlidingWindowLimiter(own, limit=50, window_seconds=60)
        start.wait()
        results = [limiter.allow("hot") for _ in range(25)]
        with lock:
            allowed.extend(results)
        own.close()

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(allowed) == 200
    assert sum(allowed) == 50


def test_keys_are_prefixed_and_expire(client) -> None:
    limiter = SlidingWindowLimiter(client, limit=10, window_seconds=5, prefix="rl:")
    for key in ("a", "b", "c"):
        limiter.allow(key)
    keys = client.keys("*")
    assert keys
    assert all(key.startswith(b"rl:") for key in keys)
    for key in keys:
        ttl_ms = client.pttl(key)
        assert 0 < ttl_ms <= 6000, (key, ttl_ms)


def test_invalid_arguments(client) -> None:
    for limit, window in [(0, 1), (-1, 1), (1.5, 1), ("3", 1), (3, 0), (3, -2), (3, "1")]:
        with pytest.raises(ValueError):  # noqa: PT011 (the message is free)
            SlidingWindowLimiter(client, limit=limit, window_seconds=window)
