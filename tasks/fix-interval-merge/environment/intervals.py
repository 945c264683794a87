"""Interval helpers for the room-booking service.

An interval is a half-open pair ``(start, end)`` with ``start < end``: it covers the points
``start <= x < end``.
"""

from collections.abc import Iterable, Sequence

Interval = tuple[float, float]


def merge_intervals(intervals: Iterable[Sequence[float]]) -> list[Interval]:
    """Merge overlapping or touching intervals into a sorted list of disjoint intervals."""
    merged: list[Interval] = []
    for start, end in intervals:
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def covered_length(intervals: Iterable[Sequence[float]]) -> float:
    """Total length of the union of the intervals."""
    return sum(end - start for start, end in intervals)


def free_slots(
    intervals: Iterable[Sequence[float]], window_start: float, window_end: float
) -> list[Interval]:
    """The maximal parts of ``[window_start, window_end)`` that no interval covers."""
    slots: list[Interval] = []
    cursor = window_start
    for start, end in merge_intervals(intervals):
        if start > cursor:
            slots.append((cursor, min(start, window_end)))
        cursor = max(cursor, end)
    return slots
