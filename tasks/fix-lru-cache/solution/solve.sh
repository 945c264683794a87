#!/usr/bin/env bash
# Reference solution: replace the buggy cache with the fixed one shipped next to this script.
set -euo pipefail
cp /solution/lru.py /app/lru.py
