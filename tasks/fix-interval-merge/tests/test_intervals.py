"""Hidden tests for /app/intervals.py; each imports the module itself so one broken
function costs only its own tests."""

import importlib
import random
import sys
from types import ModuleType

import pytest

APP_DIR = "/app"


@pytest.fixture
def iv() -> ModuleType:
    if APP_DIR not in sys.path:
        sys.path.insert(0, APP_DIR)
    sys.modules.pop("intervals", None)
    return importlib.import_module("intervals")


def test_empty_input(iv):
    assert iv.merge_intervals([]) == []


def test_disjoint_sorted_input_is_unchanged(iv):
    assert iv.merge_intervals([(1, 2), (4, 6), (8, 9)]) == [(1, 2), (4, 6), (8, 9)]


def test_overlapping_intervals_merge(iv):
    assert iv.merge_intervals([(1, 4), (2, 6), (5, 7)]) == [(1, 7)]


def test_touching_intervals_merge(iv):
    assert iv.merge_intervals([(9, 10), (10, 11), (12, 13)]) == [(9, 11), (12, 13)]


def test_unsorted_input(iv):
    assert iv.merge_intervals([(3, 5), (1, 3), (8, 9), (2, 4)]) == [(1, 5), (8, 9)]


def test_contained_interval_does_not_shrink_the_merge(iv):
    assert iv.merge_intervals([(1, 10), (2, 3), (4, 5)]) == [(1, 10)]


def test_lists_in_tuples_out_and_input_untouched(iv):
    given = [[5, 6], [1, 2], [2, 3]]
    result = iv.merge_intervals(given)
    assert result == [(1, 3), (5, 6)]
    assert all(type(pair) is tuple for pair in result)
    assert given == [[5, 6], [1, 2], [2, 3]]


def test_float_bounds(iv):
    assert iv.merge_intervals([(0.5, 1.5), (1.5, 2.25)]) == [(0.5, 2.25)]


@pytest.mark.parametrize("bad", [(3, 3), (5, 2)])
def test_invalid_intervals_are_rejected(iv, bad):
    for call in (
        lambda: iv.merge_intervals([(0, 1), bad]),
        lambda: iv.covered_length([(0, 1), bad]),
        lambda: iv.free_slots([(0, 1), bad], 0, 10),
    ):
        with pytest.raises(ValueError):  # noqa: PT011 - the message is unspecified
            call()


def test_covered_length_counts_overlaps_once(iv):
    assert iv.covered_length([(1, 4), (2, 6), (10, 11)]) == 6
    assert iv.covered_length([]) == 0


def test_free_slots_include_the_tail_of_the_window(iv):
    assert iv.free_slots([(2, 3), (5, 7)], 0, 10) == [(0, 2), (3, 5), (7, 10)]


def test_free_slots_clip_to_the_window(iv):
    assert iv.free_slots([(-5, 1), (4, 20)], 0, 10) == [(1, 4)]
    assert iv.free_slots([(20, 30)], 0, 10) == [(0, 10)]
    assert iv.free_slots([], 3, 4) == [(3, 4)]


def test_free_slots_of_a_fully_booked_window(iv):
    assert iv.free_slots([(0, 5), (5, 10)], 0, 10) == []


def test_free_slots_rejects_an_empty_window(iv):
    with pytest.raises(ValueError):  # noqa: PT011 - the message is unspecified
        iv.free_slots([(0, 1)], 5, 5)


def _cells(intervals):
    return {x for start, end in intervals for x in range(start, end)}


def _runs(cells):
    runs: list[tuple[int, int]] = []
    for x in sorted(cells):
        if runs and runs[-1][1] == x:
            runs[-1] = (runs[-1][0], x + 1)
        else:
            runs.append((x, x + 1))
    return runs


def test_random_inputs_agree_with_a_brute_force_model(iv):
    rng = random.Random(20240601)
    for _ in range(300):
        intervals = []
        for _ in range(rng.randint(0, 8)):
            start = rng.randint(0, 30)
            intervals.append((start, start + rng.randint(1, 6)))
        cells = _cells(intervals)
        assert iv.merge_intervals(intervals) == _runs(cells), intervals
        assert iv.covered_length(intervals) == len(cells), intervals
        lo = rng.randint(-2, 20)
        hi = lo + rng.randint(1, 20)
        free = set(range(lo, hi)) - cells
        assert iv.free_slots(intervals, lo, hi) == _runs(free), (intervals, lo, hi)
