"""What a controller process measures, for ``GET /metrics`` and the summaries.

Counters and histograms live in the process that runs episodes (a worker), and the queue's
state comes from the store when asked. The API renders a ``MetricsSnapshot`` in Prometheus'
text format; nothing here depends on a metrics library.
"""

from __future__ import annotations

import bisect
import time
from collections import deque

from pydantic import BaseModel, ConfigDict, Field

from envfarm.models.trajectory import Trajectory

TOKEN_WINDOW_S = 60.0
"""``tokens_per_second`` is over the attempts that ended in the last minute."""
SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Histogram(BaseModel):
    model_config = ConfigDict(extra="forbid")

    buckets: list[float] = Field(default_factory=lambda: list(SECONDS_BUCKETS))
    counts: list[int] = Field(default_factory=lambda: [0] * len(SECONDS_BUCKETS))
    """Observations at or below each bucket's bound (not cumulative; the renderer sums)."""
    count: int = 0
    sum: float = 0.0

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self.buckets, value)
        if index < len(self.counts):
            self.counts[index] += 1
        self.count += 1
        self.sum += value


class MetricsSnapshot(BaseModel):
    model_config = ConfigDict(extra="forbid")

    episodes_by_state: dict[str, int] = Field(default_factory=dict)
    """Store-wide: queued, leased, done."""
    queue_depth: int = 0
    """Episodes waiting for a worker, store-wide."""
    episodes_finished: dict[str, int] = Field(default_factory=dict)
    """This process: final episodes by outcome (valid, invalid, infra_error)."""
    attempts: int = 0
    running: int = 0
    sandbox_start_seconds: Histogram = Field(default_factory=Histogram)
    policy_latency_seconds: Histogram = Field(default_factory=Histogram)
    completion_tokens: int = 0
    tokens_per_second: float = 0.0
    """Completion tokens per second over the last minute."""
    staleness: dict[str, int] = Field(default_factory=dict)
    """Per job: versions the newest delivered group lagged the trainer."""
    policy_version: str | None = None


class WorkerMetrics:
    """Counters a worker updates as its episodes end."""

    def __init__(self) -> None:
        self.snapshot = MetricsSnapshot()
        self._tokens: deque[tuple[float, int]] = deque()
        """(when, completion tokens) of the attempts of the last ``TOKEN_WINDOW_S``."""
        self._window_tokens = 0

    def attempt(self, trajectory: Trajectory, final: bool) -> None:
        snap = self.snapshot
        snap.attempts += 1
        if trajectory.timings.provision_s is not None:
            snap.sandbox_start_seconds.observe(trajectory.timings.provision_s)
        tokens = 0
        for turn in trajectory.turns:
            snap.policy_latency_seconds.observe(turn.latency_s)
            if turn.usage and turn.usage.completion_tokens:
                tokens += turn.usage.completion_tokens
            elif turn.completion_token_ids:
                tokens += len(turn.completion_token_ids)
        snap.completion_tokens += tokens
        now = time.monotonic()
        self._tokens.append((now, tokens))
        self._window_tokens += tokens
        while now - self._tokens[0][0] >= TOKEN_WINDOW_S:
            self._window_tokens -= self._tokens.popleft()[1]
        window = max(now - self._tokens[0][0], 1.0)
        snap.tokens_per_second = self._window_tokens / window
        if final:
            if trajectory.error is not None and trajectory.error.infrastructure:
                outcome = "infra_error"
            else:
                outcome = "valid" if trajectory.reward.valid else "invalid"
            snap.episodes_finished[outcome] = snap.episodes_finished.get(outcome, 0) + 1
