#!/usr/bin/env bash
# Builds the durations repository with a fixed, reproducible history (dates, author).
set -euo pipefail
repo=$1
mkdir -p "$repo"
cd "$repo"
export GIT_AUTHOR_NAME="Dana Dev" GIT_AUTHOR_EMAIL="dana@example.com"
export GIT_COMMITTER_NAME="Dana Dev" GIT_COMMITTER_EMAIL="dana@example.com"
git init -q -b main .
day=0
commit() {
    day=$((day + 1))
    export GIT_AUTHOR_DATE="2024-03-$(printf '%02d' "$day")T10:00:00Z"
    export GIT_COMMITTER_DATE="$GIT_AUTHOR_DATE"
    git add -A
    git commit -q -m "$1"
}

cat > durations.py <<'PY'
"""Parse and format durations like "1h30m"."""

import re

_PART = re.compile(r"(\d+)([hms])")
_UNITS = {"h": 3600, "m": 60, "s": 1}


def parse_duration(text: str) -> int:
    """``"1h30m"`` -> 5400 seconds. Units h, m, s, each at most once, in that order."""
    parts = _PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    units = [u for _, u in parts]
    if units != sorted(set(units), key="hms".index):
        raise ValueError(f"units out of order or repeated: {text!r}")
    return sum(int(n) * _UNITS[u] for n, u in parts)
PY
commit "Initial duration parser"

cat >> durations.py <<'PY'


def format_duration(seconds: int) -> str:
    """5400 -> ``"1h30m"``; 0 -> ``"0s"``."""
    if seconds < 0:
        raise ValueError("a duration is never negative")
    if seconds == 0:
        return "0s"
    out = []
    for unit in "hms":
        count, seconds = divmod(seconds, _UNITS[unit])
        if count:
            out.append(f"{count}{unit}")
    return "".join(out)
PY
cat > test_durations.py <<'PY'
import pytest

from durations import format_duration, parse_duration


def test_parse():
    assert parse_duration("1h30m") == 5400
    assert parse_duration("45s") == 45


def test_format():
    assert format_duration(5400) == "1h30m"


def test_bad():
    with pytest.raises(ValueError):
        parse_duration("soon")
PY
commit "Add format_duration"

python3 - <<'PY'
from pathlib import Path

path = Path("durations.py")
text = path.read_text()
text = text.replace(
    '''    parts = _PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:''',
    '''    compact = "".join(text.split())
    parts = _PART.findall(compact)
    if not parts or "".join(n + u for n, u in parts) != compact:''',
)
text = text.replace(
    '"""``"1h30m"`` -> 5400 seconds. Units h, m, s, each at most once, in that order."""',
    '"""``"1h30m"`` or ``"1h 30m"`` -> 5400 seconds. Units h, m, s, each at most once, in\n'
    '    that order; spaces are ignored."""',
)
path.write_text(text)
PY
commit "Accept spaces between the parts of a duration"

cat > README.md <<'MD'
# durations

`parse_duration("1h 30m")` -> 5400 and `format_duration(5400)` -> `"1h30m"`.
MD
commit "Add a README"
git tag v1.0

python3 - <<'PY'
from pathlib import Path

path = Path("durations.py")
text = path.read_text()
start = text.index("def parse_duration")
end = text.index("def format_duration")
text = text[:start] + '''def parse_duration(text: str) -> int:
    """``"1h30m"`` or ``"1h 30m"`` -> 5400 seconds. Units h, m, s, each at most once, in
    that order; spaces are ignored."""
    compact = "".join(text.split())
    match = _DURATION.fullmatch(compact)
    if not compact or match is None:
        raise ValueError(f"not a duration: {text!r}")
    hours, minutes, seconds = (int(group) if group else 0 for group in match.groups())
    return hours * 3600 + minutes * 60 + seconds


''' + text[end:]
text = text.replace(
    '_UNITS = {"h": 3600, "m": 60, "s": 1}\n',
    '_UNITS = {"h": 3600, "m": 60, "s": 1}\n'
    '_DURATION = re.compile(r"(?:(\\d+)h)?(?:([0-5]?\\d)m)?(?:([0-5]?\\d)s)?")\n',
)
path.write_text(text)
PY
commit "Speed up duration parsing"

python3 - <<'PY'
from pathlib import Path

path = Path("durations.py")
text = path.read_text()
text = text.replace(
    '_UNITS = {"h": 3600, "m": 60, "s": 1}',
    '_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}',
)
text = text.replace(
    'r"(?:(\\d+)h)?(?:([0-5]?\\d)m)?(?:([0-5]?\\d)s)?"',
    'r"(?:(\\d+)d)?(?:(\\d+)h)?(?:([0-5]?\\d)m)?(?:([0-5]?\\d)s)?"',
)
text = text.replace(
    "    hours, minutes, seconds = (int(group) if group else 0 for group in match.groups())\n"
    "    return hours * 3600 + minutes * 60 + seconds\n",
    "    days, hours, minutes, seconds = (int(group) if group else 0 for group in match.groups())\n"
    "    return days * 86400 + hours * 3600 + minutes * 60 + seconds\n",
)
text = text.replace("Units h, m, s, each", "Units d, h, m, s, each")
text = text.replace('    for unit in "hms":', '    for unit in "dhms":')
path.write_text(text)
PY
cat >> test_durations.py <<'PY'


def test_days():
    assert parse_duration("2d3h") == 183600
    assert format_duration(90000) == "1d1h"
PY
commit "Add a days unit"

python3 - <<'PY'
from pathlib import Path

path = Path("durations.py")
text = path.read_text()
text = text.replace(
    'def format_duration(seconds: int) -> str:\n    """5400 -> ``"1h30m"``; 0 -> ``"0s"``."""',
    'def format_duration(seconds: int, compact: bool = True) -> str:\n'
    '    """5400 -> ``"1h30m"`` (``"1h 30m"`` when not ``compact``); 0 -> ``"0s"``."""',
)
text = text.replace('    return "".join(out)', '    return ("" if compact else " ").join(out)')
path.write_text(text)
PY
commit "format_duration: optional spaces between the parts"

cat > README.md <<'MD'
# durations

- `parse_duration("1d 2h 30m")` -> seconds. Units `d`, `h`, `m`, `s`, each at most once, in
  that order; spaces between the parts are ignored.
- `format_duration(95400)` -> `"1d2h30m"`; `format_duration(95400, compact=False)` ->
  `"1d 2h 30m"`.

Run the tests with `python -m pytest`.
MD
commit "Document the API"
