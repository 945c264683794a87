"""One HTTP exchange with the server, retried through outages.

A trainer runs for days and the controller may restart under it, so requests that are safe to
repeat are retried on connection errors, timeouts and 502/503/504, with capped exponential
backoff and jitter, for up to ``retry_for_s`` seconds (None: forever). A request that is not
safe to repeat (submitting a job) is retried only when the connection was never made, so a
job is never submitted twice. Error answers become ``ApiError`` with the server's problem.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Mapping
from typing import Any

import aiohttp

from envfarm.client.errors import ApiConnectionError, ApiError

RETRY_STATUSES = frozenset({502, 503, 504})
BACKOFF_FIRST_S = 0.2
BACKOFF_MAX_S = 5.0


class Backoff:
    """Delays for successive retries, and whether the budget allows another one."""

    def __init__(self, retry_for_s: float | None) -> None:
        self.retry_for_s = retry_for_s
        self.reset()

    def reset(self) -> None:
        self.failures = 0
        self.first_failure: float | None = None

    async def wait(self, reason: str, method: str, url: str) -> None:
        now = time.monotonic()
        if self.first_failure is None:
            self.first_failure = now
        elapsed = now - self.first_failure
        if self.retry_for_s is not None and elapsed >= self.retry_for_s:
            raise ApiConnectionError(method, url, f"{reason} (retried for {elapsed:.0f} s)")
        delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2**self.failures)
        self.failures += 1
        await asyncio.sleep(delay * random.uniform(0.5, 1.0))


class Transport:
    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        timeout_s: float,
        retry_for_s: float | None,
        session: aiohttp.ClientSession | None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout_s = timeout_s
        self.retry_for_s = retry_for_s
        self._session = session
        self._owns_session = session is None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    def url(self, path: str) -> str:
        return self.base_url + path

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str | int | float] | None = None,
        extra_timeout_s: float = 0.0,
        idempotent: bool = True,
    ) -> Any:
        """The decoded JSON answer (None for 204)."""
        url = self.url(path)
        backoff = Backoff(self.retry_for_s)
        timeout = aiohttp.ClientTimeout(total=self.timeout_s + extra_timeout_s)
        while True:
            try:
                async with self.session.request(
                    method, url, json=body, params=params, headers=self.headers, timeout=timeout
                ) as response:
                    if response.status in RETRY_STATUSES and idempotent:
                        reason = f"{response.status} {response.reason}"
                    else:
                        return await decode(response, method, url)
            except aiohttp.ClientConnectorError as exc:
                reason = f"cannot connect: {exc}"
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
                if not idempotent:
                    raise ApiConnectionError(
                        method, url, f"connection lost, outcome unknown: {exc!r}"
                    ) from exc
                reason = f"connection lost: {exc!r}"
            await backoff.wait(reason, method, url)


async def decode(response: aiohttp.ClientResponse, method: str, url: str) -> Any:
    if response.status == 204:
        return None
    text = await response.text()
    if 200 <= response.status < 300:
        return json.loads(text) if text else None
    raise error_of(response.status, response.reason, text, method, url)


def error_of(status: int, reason: str | None, text: str, method: str, url: str) -> ApiError:
    try:
        problem = json.loads(text)
    except ValueError:
        problem = None
    if not isinstance(problem, dict):
        problem = {"status": status, "title": reason or "error", "detail": text[:500] or None}
    return ApiError(status, problem, method, url)
