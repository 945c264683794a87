import subprocess
from pathlib import Path

import pytest
from durations import format_duration, parse_duration

REPO = "/app"


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-c", "safe.directory=*", "-C", REPO, *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_the_regression_commit_is_named():
    culprit = git("log", "--all", "--format=%H", "--grep=^Speed up duration parsing$")
    assert len(culprit) == 40
    assert Path(REPO, "REGRESSION_COMMIT").read_text().strip() == culprit


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90m", 5400),
        ("150s", 150),
        ("1h90m", 9000),
        ("2h 120m 3600s", 18000),
        ("1d 90m", 91800),
        ("100m 100s", 6100),
    ],
)
def test_minutes_and_seconds_above_59(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1h30m", 5400), ("45s", 45), ("1h 30m", 5400), ("2h", 7200), ("0s", 0), ("1h5m7s", 3907)],
)
def test_v1_behaviour(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "  ", "soon", "5", "30m1h", "1h1h", "1x", "h", "-5m"])
def test_not_durations(text):
    with pytest.raises(ValueError):  # noqa: PT011 (the message is not specified)
        parse_duration(text)


def test_days_are_kept():
    assert parse_duration("2d3h") == 183600
    assert parse_duration("1d") == 86400


def test_formatting_is_kept():
    assert format_duration(93784) == "1d2h3m4s"
    assert format_duration(93784, compact=False) == "1d 2h 3m 4s"
    assert format_duration(0) == "0s"
    with pytest.raises(ValueError):  # noqa: PT011 (the message is not specified)
        format_duration(-1)


@pytest.mark.parametrize("seconds", [1, 59, 60, 3599, 3600, 86399, 86400, 1000000])
def test_round_trip(seconds):
    assert parse_duration(format_duration(seconds)) == seconds
    assert parse_duration(format_duration(seconds, compact=False)) == seconds
