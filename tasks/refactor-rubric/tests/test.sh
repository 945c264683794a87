#!/usr/bin/env bash
# Runs the hidden tests and writes /logs/verifier/reward.json with partial credit:
# reward = passed tests / collected tests (0 when nothing could be collected).
set -u
mkdir -p /logs/verifier
cd /app
python -m pytest /tests --rootdir=/tests -p no:cacheprovider -rA \
    --junitxml=/logs/verifier/junit.xml
python - <<'PY'
import json
import xml.etree.ElementTree as ET
from pathlib import Path

junit = Path("/logs/verifier/junit.xml")
outcomes: dict[str, bool] = {}
if junit.is_file():
    for case in ET.parse(junit).iter("testcase"):
        key = f"{case.get('classname')}::{case.get('name')}"
        failed = any(case.find(tag) is not None for tag in ("failure", "error", "skipped"))
        outcomes[key] = outcomes.get(key, True) and not failed
passed, total = sum(outcomes.values()), len(outcomes)
reward = {"reward": passed / total if total else 0.0, "tests_passed": passed, "tests_total": total}
Path("/logs/verifier/reward.json").write_text(json.dumps(reward) + "\n")
print(f"reward: {reward}")
PY
