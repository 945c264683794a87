#!/usr/bin/env bash
# Runs the hidden node:test suite; the reward is 1 only when the runner exits 0 and its TAP
# summary counts passes and no failure. reward.json also keeps the counts.
set -u
mkdir -p /logs/verifier
cd /app
node --test /tests/ > /logs/verifier/node-test.tap 2>&1
status=$?
cat /logs/verifier/node-test.tap
count() { awk -v key="$1" '$1 == "#" && $2 == key { n = $3 } END { print n + 0 }' \
    /logs/verifier/node-test.tap; }
pass=$(count pass)
fail=$(count fail)
reward=0
if [ "$status" -eq 0 ] && [ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]; then reward=1; fi
printf '{"reward": %s, "tests_passed": %s, "tests_failed": %s}\n' "$reward" "$pass" "$fail" \
    > /logs/verifier/reward.json
cat /logs/verifier/reward.json
