#!/usr/bin/env bash
# Reference solution: install the report script, then produce the report.
set -euo pipefail
cp /solution/report.py /app/report.py
python /app/report.py
