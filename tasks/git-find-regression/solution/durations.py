"""Parse and format durations like "1h30m"."""

import re

_PART = re.compile(r"(\d+)([hms])")
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def parse_duration(text: str) -> int:
    """``"1h30m"`` or ``"1h 30m"`` -> 5400 seconds. Units d, h, m, s, each at most once, in
    that order; spaces are ignored."""
    compact = "".join(text.split())
    match = _DURATION.fullmatch(compact)
    if not compact or match is None:
        raise ValueError(f"not a duration: {text!r}")
    days, hours, minutes, seconds = (int(group) if group else 0 for group in match.groups())
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


def format_duration(seconds: int, compact: bool = True) -> str:
    """5400 -> ``"1h30m"`` (``"1h 30m"`` when not ``compact``); 0 -> ``"0s"``."""
    if seconds < 0:
        raise ValueError("a duration is never negative")
    if seconds == 0:
        return "0s"
    out = []
    for unit in "dhms":
        count, seconds = divmod(seconds, _UNITS[unit])
        if count:
            out.append(f"{count}{unit}")
    return ("" if compact else " ").join(out)
