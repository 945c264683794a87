"""What grading in place removes and when it gives up (``grading/cleanroom/inplace.py``), on
listings."""

from __future__ import annotations

import pytest

from envfarm.errors import TaskSpecError
from envfarm.grading.cleanroom.carry import Listing
from envfarm.grading.cleanroom.inplace import left_out_removals, plan_in_place
from envfarm.grading.cleanroom.scope import CarryScope
from envfarm.settings import Settings

START = 1_700_000_000.0
OLD, NEW = START - 100, START + 50


def listings(
    before: dict[str, str], after: dict[str, tuple[str, float]]
) -> tuple[Listing, Listing, CarryScope]:
    mounts = ["/", "/proc", "/etc/hosts", "/.envfarm/sandboxd", "/logs/verifier/tmpfs"]
    old = Listing("/app", START, {p: (k, OLD) for p, k in before.items()}, mounts)
    new = Listing("/app", START, after, mounts)
    return old, new, CarryScope(workdir="/app", mounts=mounts)


def test_what_the_agent_added_where_carrying_looks_away_is_removed_top_most() -> None:
    before, after, scope = listings(
        {"app": "d", "app/calc.py": "f"},
        {
            "app": ("d", NEW),
            "app/calc.py": ("f", NEW),
            "app/__pycache__": ("d", NEW),
            "app/__pycache__/calc.cpython-311.pyc": ("f", NEW),
            "solution": ("d", NEW),
            "solution/solve.sh": ("f", NEW),
            "tmp": ("d", NEW),
            "tmp/.envfarm-carry-1": ("f", NEW),
            "tmp/mine": ("f", NEW),
        },
    )
    assert left_out_removals(before, after, scope) == [
        "/app/__pycache__",
        "/solution",
        "/tmp/.envfarm-carry-1",
    ]


def test_what_the_image_had_there_and_mounts_stay() -> None:
    before, after, scope = listings(
        {},
        {
            "tests": ("d", NEW),
            "tests/from-image.py": ("f", OLD),
            "tests/planted.py": ("f", NEW),
            ".envfarm": ("d", NEW),  # holds the helper's bind mount
            ".envfarm/note": ("f", NEW),
            "logs": ("d", NEW),
            "logs/verifier": ("d", NEW),  # a tmpfs is mounted below it
            "logs/verifier/reward.txt": ("f", NEW),
            "logs/agent": ("d", NEW),
            "usr/lib/__pycache__/site.pyc": ("f", OLD),
        },
    )
    assert left_out_removals(before, after, scope) == [
        "/.envfarm/note",
        "/logs/agent",
        "/logs/verifier/reward.txt",
        "/tests/planted.py",
    ]


def test_a_changed_test_or_watched_file_needs_a_fresh_container() -> None:
    before, after, scope = listings(
        {"app": "d", "app/test_calc.py": "f", "usr/local/bin/python3": "f"},
        {"app": ("d", OLD), "app/test_calc.py": ("f", NEW), "usr/local/bin/python3": ("f", OLD)},
    )
    why = plan_in_place(before, after, scope)
    assert isinstance(why, str)
    assert why.endswith("(/app/test_calc.py)")  # the note names what needs the image's copy
    before, after, scope = listings(
        {"app": "d", "usr/local/bin": "d", "usr/local/bin/python3": "f"},
        {"app": ("d", OLD), "usr/local/bin": ("d", NEW)},  # python3 deleted
    )
    why = plan_in_place(before, after, scope)
    assert isinstance(why, str)
    assert "(/usr/local/bin/python3)" in why


def test_the_fresh_container_note_names_a_few_paths_and_counts_the_rest() -> None:
    tests = {f"app/test_{i}.py": "f" for i in range(8)}
    before, after, scope = listings(
        {"app": "d", **tests}, {"app": ("d", OLD), **dict.fromkeys(tests, ("f", NEW))}
    )
    why = plan_in_place(before, after, scope)
    assert isinstance(why, str)
    assert "/app/test_0.py, /app/test_1.py" in why
    assert why.endswith("and 3 more)")


def test_grading_in_place_records_what_carrying_would_have_given() -> None:
    before, after, scope = listings(
        {"app": "d", "app/calc.py": "f", "etc": "d", "etc/old": "f"},
        {
            "app": ("d", OLD),
            "app/calc.py": ("f", NEW),
            "etc": ("d", NEW),
            "etc/new": ("f", NEW),
        },
    )
    planned = plan_in_place(before, after, scope)
    assert not isinstance(planned, str), planned
    assert planned.carry.carried == ["app/calc.py", "etc", "etc/new"]
    assert planned.carry.deleted == ["etc/old"]
    assert planned.carry.archive is None
    assert planned.remove == []


def test_the_clean_room_route_is_chosen_by_the_environment() -> None:
    assert (Settings.from_env({}).clean_room == "restart") is True
    assert (Settings.from_env({"ENVFARM_CLEAN_ROOM": "fresh"}).clean_room == "restart") is False
    assert (Settings.from_env({"ENVFARM_CLEAN_ROOM": " Restart "}).clean_room == "restart") is True
    with pytest.raises(TaskSpecError, match="ENVFARM_CLEAN_ROOM"):
        Settings.from_env({"ENVFARM_CLEAN_ROOM": "sometimes"})
