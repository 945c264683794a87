"""A sliding-window rate limiter whose state lives in Redis.

Each key is a sorted set of the allowed requests, scored by the server's time in microseconds.
One Lua script trims the entries older than the window, counts the rest and adds the request
only when the count is below the limit, so concurrent callers can never over-admit.
"""

from __future__ import annotations

import uuid

import redis

_ALLOW = """
local now = redis.call('TIME')
local micros = tonumber(now[1]) * 1000000 + tonumber(now[2])
local window = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', micros - window)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('ZADD', KEYS[1], micros, ARGV[3])
    redis.call('PEXPIRE', KEYS[1], math.ceil(window / 1000))
    return 1
end
return 0
"""
_COUNT = """
local now = redis.call('TIME')
local micros = tonumber(now[1]) * 1000000 + tonumber(now[2])
return redis.call('ZCOUNT', KEYS[1], '(' .. (micros - tonumber(ARGV[1])), '+inf')
"""


class SlidingWindowLimiter:
    def __init__(
        self,
        client: redis.Redis,
        limit: int,
        window_seconds: float,
        prefix: str = "ratelimit:",
    ) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be an int >= 1, got {limit!r}")
        if (
            isinstance(window_seconds, bool)
            or not isinstance(window_seconds, int | float)
            or not window_seconds > 0
        ):
            raise ValueError(f"window_seconds must be a number > 0, got {window_seconds!r}")
        self.client = client
        self.limit = limit
        self.window_micros = max(1, round(window_seconds * 1_000_000))
        self.prefix = prefix
        self._allow = client.register_script(_ALLOW)
        self._count = client.register_script(_COUNT)

    def allow(self, key: str) -> bool:
        member = uuid.uuid4().hex
        keys = [self.prefix + key]
        return bool(self._allow(keys=keys, args=[self.window_micros, self.limit, member]))

    def remaining(self, key: str) -> int:
        used = int(self._count(keys=[self.prefix + key], args=[self.window_micros]))
        return max(0, self.limit - used)
