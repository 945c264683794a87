"""One request attempt's transient failure, and how its cause is described.

``OpenAIPolicy.attempt`` returns an ``AttemptFailure`` for what a retry may fix (HTTP 408, 429,
500, 502, 503, 504, connection errors, timeouts) and raises what it cannot; the single client
and ``EndpointPool`` each decide whether and when to retry. A side request (rendering or
tokenizing through the server's own API) raises the same failure as ``SideRequestFailed``, so
the pool can retry it as it retries a completion.
"""

from __future__ import annotations

import email.utils
from dataclasses import dataclass
from datetime import UTC, datetime

from envfarm.errors import PolicyError

RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
PAUSE_STATUSES = frozenset({429, 503})
"""Statuses of a server that is alive but not taking work now (a weight swap, no capacity)."""


@dataclass(frozen=True)
class AttemptFailure:
    """A transient failure of one request attempt; the caller decides whether to retry."""

    cause: str
    """HTTP status and body excerpt, or the connection error (API key scrubbed)."""
    status: int | None = None
    """None when no answer came at all (connection refused or reset, timeout)."""
    retry_after: float | None = None
    error: BaseException | None = None
    elapsed_s: float = 0.0

    @property
    def paused(self) -> bool:
        return self.status in PAUSE_STATUSES


class SideRequestFailed(PolicyError):
    """A request beside the completions (``/tokenize``, ``/apply-template``) that failed the
    way an attempt may: no answer, or HTTP 408, 429 or 5xx. A ``PolicyError`` to callers that
    take it as one; ``EndpointPool.side_request`` retries it with the pool's breaker and waits
    out an outage, as it does for completions."""

    def __init__(self, failure: AttemptFailure) -> None:
        super().__init__(failure.cause)
        self.failure = failure


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date)."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def timeout_cause(timeout_s: float) -> str:
    """How a request that got no complete answer in time is described."""
    return f"no complete answer within {timeout_s:g}s"


def describe_error(exc: BaseException, timeout_s: float) -> str:
    """A connection error or timeout in a few words (the caller scrubs the API key)."""
    if isinstance(exc, TimeoutError):
        return timeout_cause(timeout_s)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
