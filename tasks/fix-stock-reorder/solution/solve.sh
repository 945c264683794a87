#!/usr/bin/env bash
# Reference solution: units ignore case and spaces, the ledger takes received *pieces* off the
# order, and suggestions round up to whole packs.
set -euo pipefail
cp /solution/stock/units.py /solution/stock/ledger.py /solution/stock/reorder.py /app/stock/
