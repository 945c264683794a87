"""Interval helpers for the room-booking service.

An interval is a half-open pair ``(start, end)`` with ``start < end``: it covers the points
``start <= x < end``.
"""

from collections.abc import Iterable, Sequence

Interval = tuple[float, float]


def _checked(intervals: Iterable[Sequence[float]]) -> list[Interval]:
    pairs: list[Interval] = []
    for start, end in intervals:
        if start >= end:
            raise ValueError(f"interval ({start}, {end}) must have start < end")
        pairs.append((start, end))
    return pairs


def merge_intervals(intervals: Iterable[Sequence[float]]) -> list[Interval]:
    """Merge overlapping or touching intervals into a sorted list of disjoint intervals."""
    merged: list[Interval] = []
    for start, end in sorted(_checked(intervals)):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def covered_length(intervals: Iterable[Sequence[float]]) -> float:
    """Total length of the union of the intervals."""
    return sum(end - start for start, end in merge_intervals(intervals))


def free_slots(
    intervals: Iterable[Sequence[float]], window_start: float, window_end: float
) -> list[Interval]:
    """The maximal parts of ``[window_start, window_end)`` that no interval covers."""
    if window_start >= window_end:
        raise ValueError(f"window ({window_start}, {window_end}) must have start < end")
    slots: list[Interval] = []
    cursor = window_start
    for start, end in merge_intervals(intervals):
        if start >= window_end:
            break
        if start > cursor:
            slots.append((cursor, start))
        cursor = max(cursor, end)
    if cursor < window_end:
        slots.append((cursor, window_end))
    return slots
