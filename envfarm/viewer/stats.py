"""Figures of a run computed from its entries: per-task tables, pass@k, groups, histograms.

pass@k is the unbiased estimator of Chen et al. (2021) over a task's valid episodes: with ``n``
episodes of which ``c`` passed, ``1 - C(n - c, k) / C(n, k)``; an episode *passes* when its
reward is valid and at least 1. Invalid episodes are left out of every reward figure, as a
trainer leaves them out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field

from envfarm.viewer.entries import PHASES, Entry


@dataclass
class Filters:
    flagged: bool = False
    invalid: bool = False
    zero_variance: bool = False
    task: str | None = None
    outcome: str | None = None
    group: str | None = None

    def keep(self, entry: Entry) -> bool:
        return (
            (not self.flagged or bool(entry.flags))
            and (not self.invalid or not entry.valid)
            and (not self.zero_variance or entry.zero_variance is True)
            and (self.task is None or entry.task_id == self.task)
            and (self.outcome is None or entry.outcome == self.outcome)
            and (self.group is None or entry.group_id == self.group)
        )

    def active(self) -> bool:
        return any(
            (self.flagged, self.invalid, self.zero_variance, self.task, self.outcome, self.group)
        )


@dataclass
class TaskRow:
    task_id: str
    episodes: int = 0
    valid: int = 0
    passed: int = 0
    flagged: int = 0
    zero_variance_groups: int = 0
    values: list[float] = field(default_factory=list)

    @property
    def invalid(self) -> int:
        return self.episodes - self.valid

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def std(self) -> float | None:
        return statistics.pstdev(self.values) if len(self.values) > 1 else None

    def pass_at(self, k: int) -> float | None:
        return pass_at_k(len(self.values), self.passed, k)


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """None when fewer than ``k`` episodes were valid."""
    if n < k or k < 1:
        return None
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_ks(rows: Iterable[TaskRow]) -> list[int]:
    """1, then powers of two up to the largest task's number of valid episodes (four at most)."""
    most = max((len(r.values) for r in rows), default=0)
    ks = [1]
    while ks[-1] * 2 <= most and len(ks) < 4:
        ks.append(ks[-1] * 2)
    return ks


def task_rows(entries: Iterable[Entry]) -> list[TaskRow]:
    rows: dict[str, TaskRow] = {}
    zero_groups: dict[str, set[str]] = {}
    for entry in entries:
        row = rows.setdefault(entry.task_id, TaskRow(entry.task_id))
        row.episodes += 1
        row.flagged += bool(entry.flags)
        if entry.valid and entry.value is not None:
            row.valid += 1
            row.values.append(entry.value)
            row.passed += entry.passed
        if entry.zero_variance:
            zero_groups.setdefault(entry.task_id, set()).add(entry.group_id)
    for task_id, groups in zero_groups.items():
        rows[task_id].zero_variance_groups = len(groups)
    return sorted(rows.values(), key=lambda r: r.task_id)


def groups_of(entries: Iterable[Entry]) -> dict[str, list[Entry]]:
    groups: dict[str, list[Entry]] = {}
    for entry in entries:
        groups.setdefault(entry.group_id, []).append(entry)
    return groups


def valid_values(entries: Iterable[Entry]) -> list[float]:
    return [e.value for e in entries if e.valid and e.value is not None]


def histogram(values: list[float], bins: int = 10) -> tuple[float, float, list[int]]:
    """``(low, high, counts)``; rewards in [0, 1] keep that range so histograms compare."""
    if not values:
        return 0.0, 1.0, [0] * bins
    low, high = min(values), max(values)
    if low >= 0.0 and high <= 1.0:
        low, high = 0.0, 1.0
    if high == low:
        high = low + 1.0
    counts = [0] * bins
    for value in values:
        slot = min(bins - 1, int((value - low) / (high - low) * bins))
        counts[slot] += 1
    return low, high, counts


def by_policy_version(entries: Iterable[Entry]) -> list[tuple[str, float, int]]:
    """``(version, mean reward, episodes)`` per policy version (the latest of each episode), in
    numeric order when every version is a number, else in order of first appearance."""
    seen: dict[str, list[float]] = {}
    for entry in entries:
        if entry.valid and entry.value is not None:
            seen.setdefault(entry.policy_version or "none", []).append(entry.value)
    versions = list(seen)
    if all(_is_number(v) for v in versions if v != "none"):
        versions.sort(key=lambda v: (v == "none", float(v) if v != "none" else 0.0))
    return [(v, statistics.fmean(seen[v]), len(seen[v])) for v in versions]


def phase_means(entries: Iterable[Entry]) -> dict[str, float]:
    sums = dict.fromkeys(PHASES, 0.0)
    count = 0
    for entry in entries:
        if not entry.timings:
            continue
        count += 1
        for phase in PHASES:
            sums[phase] += entry.timings.get(phase) or 0.0
    return {phase: total / count for phase, total in sums.items()} if count else {}


def outcomes(entries: Iterable[Entry]) -> dict[str, int]:
    counted: dict[str, int] = {}
    for entry in entries:
        counted[entry.outcome] = counted.get(entry.outcome, 0) + 1
    return dict(sorted(counted.items()))


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
