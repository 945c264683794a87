#!/usr/bin/env bash
# Reference solution: replace the god-function module with the refactored one shipped here.
set -euo pipefail
cp /solution/orders.py /app/orders.py
