#!/usr/bin/env bash
# Reference solution: replace the stub with the implementation shipped next to this script.
set -euo pipefail
cp /solution/ratelimit.py /app/ratelimit.py
