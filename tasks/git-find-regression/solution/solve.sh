#!/usr/bin/env bash
# Reference solution: bisect between v1.0 and HEAD with a check of the reported symptom, record
# the first bad commit, then fix the minutes/seconds pattern on top of HEAD.
set -euo pipefail
cd /app
git bisect start HEAD v1.0 >/dev/null
git bisect run python -B -c 'from durations import parse_duration; assert parse_duration("90m") == 5400' \
    >/dev/null
git rev-parse refs/bisect/bad > /app/REGRESSION_COMMIT
git bisect reset >/dev/null 2>&1
cp /solution/durations.py /app/durations.py
