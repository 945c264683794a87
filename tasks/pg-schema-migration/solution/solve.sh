#!/usr/bin/env bash
# Reference solution: install the migration shipped next to this script and apply it.
set -euo pipefail
cp /solution/002_split_customer_name.sql /app/migrations/
python3 /app/migrate.py
