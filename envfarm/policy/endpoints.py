"""The parts of an ``EndpointPool``: its settings, one endpoint's state, one call's retries.

An endpoint has a load (requests in flight), a pause window and a circuit breaker. The breaker
is ``closed`` (takes traffic) until ``threshold`` consecutive failures eject it (``open``). An
ejected endpoint is probed with ``GET /models`` every ``cooldown_s`` (``probing`` while a probe
runs) by a background task; the first successful probe closes the breaker and calls ``on_back``
so waiting requests can use it at once. A pause (503/429, an aborted generation) is not a
failure: it only keeps the endpoint out of routing until ``paused_until``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from envfarm.errors import PolicyError
from envfarm.models.jobs import EndpointRequest
from envfarm.policy.base import RetryKind, RetryRecord
from envfarm.policy.openai import OpenAIPolicy

log = logging.getLogger(__name__)

BreakerState = Literal["closed", "open", "probing"]


EndpointSpec = EndpointRequest
"""One endpoint of a pool, as a job names it (the wire model, ``envfarm.models.jobs``)."""


class EndpointStatus(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str
    weight: float
    state: BreakerState
    """``closed``: takes traffic; ``open``: ejected; ``probing``: ejected, a probe is running."""
    in_flight: int
    consecutive_failures: int
    paused: bool
    served: int
    """Completions this endpoint delivered."""


class PoolEndpoint:
    def __init__(self, index: int, client: OpenAIPolicy, weight: float) -> None:
        self.index, self.client, self.weight = index, client, weight
        self.url = client.base_url
        self.in_flight = self.failures = self.served = 0
        self.state: BreakerState = "closed"
        self.paused_until = 0.0
        self._recovery: asyncio.Task[None] | None = None

    def rank(self) -> tuple[float, float, int]:
        """Least loaded first; ties go to the heavier, then to the one listed first."""
        return self.in_flight / self.weight, -self.weight, self.index

    def ready(self, now: float) -> bool:
        return self.state == "closed" and self.paused_until <= now

    def succeeded(self) -> None:
        self.failures = 0

    def failed(self, threshold: int) -> bool:
        """Count a failure; True when it is the one that ejects the endpoint."""
        self.failures += 1
        return self.state == "closed" and self.failures >= threshold

    def pause(self, until: float) -> None:
        self.paused_until = max(self.paused_until, until)

    def eject(
        self, cause: str, cooldown_s: float, probe_timeout_s: float, on_back: Callable[[], None]
    ) -> None:
        self.state = "open"
        log.warning(
            "policy endpoint %s ejected after %d consecutive failures (last: %s); "
            "probing it every %gs",
            self.url,
            self.failures,
            cause,
            cooldown_s,
        )
        self._recovery = asyncio.create_task(self._recover(cooldown_s, probe_timeout_s, on_back))

    async def _recover(
        self, cooldown_s: float, timeout_s: float, on_back: Callable[[], None]
    ) -> None:
        while True:
            await asyncio.sleep(cooldown_s)
            self.state = "probing"
            problem = await self.client.probe(timeout_s)
            if problem is None:
                break
            self.state = "open"
            log.info("policy endpoint %s is still down: %s", self.url, problem)
        self.state, self.failures, self._recovery = "closed", 0, None
        log.warning("policy endpoint %s is back", self.url)
        on_back()

    def status(self, now: float | None = None) -> EndpointStatus:
        return EndpointStatus(
            url=self.url,
            weight=self.weight,
            state=self.state,
            in_flight=self.in_flight,
            consecutive_failures=self.failures,
            paused=self.paused_until > (time.monotonic() if now is None else now),
            served=self.served,
        )

    async def aclose(self) -> None:
        if self._recovery is not None:
            task, self._recovery = self._recovery, None
            task.cancel()
            await asyncio.wait([task])
        await self.client.aclose()


class PoolSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_retries: int = Field(default=5, ge=0)
    """Ordinary failures (connection errors, 5xx but 503) one request survives."""
    backoff_base_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=30.0, ge=0)
    breaker_failures: int = Field(default=3, ge=1)
    """Consecutive failures that eject an endpoint."""
    cooldown_s: float = Field(default=5.0, ge=0)
    """Time between probes of an ejected endpoint."""
    probe_timeout_s: float = Field(default=5.0, gt=0)
    down_budget_s: float = Field(default=120.0, ge=0)
    """How long a request waits while every endpoint is ejected."""
    pause_budget_s: float = Field(default=600.0, ge=0)
    """How long a request rides out 503/429 and aborts (weight swaps) before giving up."""
    pause_backoff_base_s: float = Field(default=0.5, ge=0)
    pause_backoff_max_s: float = Field(default=15.0, ge=0)
    request_timeout_s: float = Field(default=600.0, gt=0)


class CallState:
    """The retry state of one ``complete()`` call."""

    def __init__(self, session: str | None) -> None:
        self.session = session
        self.attempts = self.errors = self.pauses = 0
        self.retries: list[RetryRecord] = []
        self.avoid: set[PoolEndpoint] = set()
        """Endpoints that failed this call: others are tried first."""
        self.backoff_from: PoolEndpoint | None = None
        self.backoff_s = 0.0
        """Wait before sending to ``backoff_from`` again (none when another endpoint is ready)."""
        self.pause_started: float | None = None
        self.down_since: float | None = None

    def note(self, kind: RetryKind, cause: str, endpoint: str | None, elapsed_s: float) -> None:
        self.retries.append(
            RetryRecord(cause=cause, delay_s=0.0, kind=kind, endpoint=endpoint, elapsed_s=elapsed_s)
        )

    def waiting(self, kind: RetryKind, cause: str) -> RetryRecord:
        """The record a wait of ``kind`` is charged to: the last one when it is of the same
        kind (a pause and an abort are both pauses), else a new one."""
        last = self.retries[-1].kind if self.retries else None
        if last != kind and {last, kind} != {"pause", "abort"}:
            self.note(kind, cause, None, 0.0)
        return self.retries[-1]

    def pause_clock(self, now: float, budget_s: float, cause: str, elapsed_s: float = 0.0) -> float:
        """Start the pause clock (at the start of an attempt ``elapsed_s`` long) unless it runs;
        the time left in ``budget_s``, or PolicyError when it is spent."""
        if self.pause_started is None:
            self.pause_started = now - elapsed_s
        if now - self.pause_started > budget_s:
            raise PolicyError(
                f"the policy stayed paused longer than the pause budget of {budget_s:g}s "
                f"({self.pauses} pauses and aborts); last: {cause}"
            )
        return self.pause_started + budget_s - now

    def last_cause(self) -> str:
        causes = [f"{r.endpoint}: {r.cause}" for r in self.retries if r.endpoint]
        return causes[-1] if causes else "none recorded by this request"

    def paused_s(self) -> float:
        return sum(r.delay_s + r.elapsed_s for r in self.retries if r.kind in ("pause", "abort"))
