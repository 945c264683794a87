#!/usr/bin/env bash
# Reference solution: numeric version parts, releases above pre-releases, spec identifier
# order, build metadata ignored.
set -euo pipefail
cp /solution/semver.js /app/semver.js
