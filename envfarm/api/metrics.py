"""``GET /metrics``: the controller's numbers in Prometheus text format.

The controller keeps its own counters and hands out a snapshot (``MetricsSnapshot``) when
asked; the route fetches one and this collector renders it, in a registry owned by one app
(several apps in one process, as in tests, never share or collide). The snapshot's shape picks
the metric type, so fields added to the snapshot show up without changes here:

- a number ``queue_depth``                    -> gauge ``envfarm_queue_depth`` (counters:
  ``attempts`` -> ``envfarm_attempts_total``, ``completion_tokens``)
- a mapping ``episodes_by_state: {queued: 3}`` -> ``envfarm_episodes{state="queued"}``; the
  label of each mapping is named in ``LABELS`` (``staleness`` is per ``job``)
- ``{buckets, counts, count, sum}``            -> histogram (``envfarm_sandbox_start_seconds``)
- a string ``policy_version``                  -> ``envfarm_policy_version_info{policy_version=..}``
- ``None`` (not measured yet) is left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from pydantic import BaseModel

PREFIX = "envfarm_"
LABELS: dict[str, tuple[str, str]] = {
    "episodes_by_state": ("episodes", "state"),
    "episodes_finished": ("episodes_finished", "outcome"),
    "staleness": ("staleness", "job"),
}
COUNTERS = frozenset({"attempts", "completion_tokens", "episodes_finished"})
HELP = {
    "episodes_by_state": "Episodes in the store by state (queued, leased, done).",
    "queue_depth": "Episodes waiting for a worker, store-wide.",
    "episodes_finished": "Final episodes this process ended, by outcome.",
    "attempts": "Episode attempts this process ran.",
    "running": "Episodes this process is running now.",
    "sandbox_start_seconds": "Seconds from asking for a sandbox to its being ready.",
    "policy_latency_seconds": "Seconds per policy call (model turn).",
    "completion_tokens": "Completion tokens sampled by episodes of this process.",
    "tokens_per_second": "Completion tokens per second over the last minute.",
    "staleness": "Per job: policy versions the newest delivered group lagged the trainer.",
    "policy_version": "The policy version the trainer published last.",
}

Snapshot = BaseModel | Mapping[str, Any]


class SnapshotCollector(Collector):
    """Renders the snapshot the route put in ``latest`` just before the scrape."""

    def __init__(self) -> None:
        self.latest: Snapshot = {}

    def collect(self) -> Iterable[Metric]:
        data = self.latest
        values = data.model_dump(mode="json") if isinstance(data, BaseModel) else dict(data)
        for name, value in values.items():
            family = _family(name, HELP.get(name, name.replace("_", " ")), value)
            if family is not None:
                yield family


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _family(name: str, doc: str, value: Any) -> Metric | None:
    full = PREFIX + name
    if isinstance(value, bool):
        value = int(value)
    if _number(value):
        if name in COUNTERS:
            return CounterMetricFamily(full, doc, value=value)
        return GaugeMetricFamily(full, doc, value=value)
    if isinstance(value, str):
        return InfoMetricFamily(full, doc, value={name: value})
    if isinstance(value, Mapping) and {"buckets", "counts"} <= value.keys():
        return _histogram(full, doc, value)
    if isinstance(value, Mapping):
        base, label = LABELS.get(name, (name, "key"))
        kind = CounterMetricFamily if name in COUNTERS else GaugeMetricFamily
        family = kind(PREFIX + base, doc, labels=[label])
        for key, number in sorted(value.items()):
            if _number(number):
                family.add_metric([str(key)], number)
        return family
    return None


def _histogram(name: str, doc: str, value: Mapping[str, Any]) -> Metric:
    """From per-bucket counts (observations at or below each bound, not cumulative)."""
    cumulative, buckets = 0, []
    for bound, count in zip(value["buckets"], value["counts"], strict=True):
        cumulative += int(count)
        buckets.append((repr(float(bound)), cumulative))
    buckets.append(("+Inf", int(value.get("count", cumulative))))
    family = HistogramMetricFamily(name, doc)
    family.add_metric([], buckets=buckets, sum_value=float(value.get("sum", 0.0)))
    return family


class Metrics:
    """One app's registry: ``render(snapshot)`` is the text of one scrape."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = SnapshotCollector()
        self.registry.register(self.collector)

    def render(self, snapshot: Snapshot) -> bytes:
        self.collector.latest = snapshot
        return generate_latest(self.registry)
