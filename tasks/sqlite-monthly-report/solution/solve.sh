#!/usr/bin/env bash
# Reference solution: the report query.
set -euo pipefail
cp /solution/report.sql /app/report.sql
