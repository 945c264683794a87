#!/usr/bin/env bash
# Reference solution: acronym-aware split_words, to_camel and to_pascal, exported.
set -euo pipefail
cp /solution/textkit/case.py /solution/textkit/__init__.py /app/textkit/
