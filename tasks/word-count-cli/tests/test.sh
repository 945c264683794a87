#!/usr/bin/env bash
# Runs the hidden tests; the reward is binary: /logs/verifier/reward.txt holds 1 when every
# test passed, else 0.
set -u
mkdir -p /logs/verifier
cd /app
if python -m pytest /tests --rootdir=/tests -p no:cacheprovider -rA \
    --junitxml=/logs/verifier/junit.xml; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
