"""A sliding-window rate limiter whose state lives in Redis (see the task's instructions)."""

from __future__ import annotations

import redis


class SlidingWindowLimiter:
    def __init__(
        self,
        client: redis.Redis,
        limit: int,
        window_seconds: float,
        prefix: str = "ratelimit:",
    ) -> None:
        raise NotImplementedError

    def allow(self, key: str) -> bool:
        raise NotImplementedError

    def remaining(self, key: str) -> int:
        raise NotImplementedError
