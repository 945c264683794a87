#!/usr/bin/env bash
# Reference solution: replace the buggy module with the fixed one shipped next to this script.
set -euo pipefail
cp /solution/intervals.py /app/intervals.py
