#!/usr/bin/env bash
# Reference solution: deep_merge copies what it returns and merges nested tables at every depth.
set -euo pipefail
cp /solution/merge.py /app/confkit/merge.py
