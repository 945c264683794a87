#!/usr/bin/env bash
# SWE-bench style grading: tests/config.json lists FAIL_TO_PASS (the feature's tests) and
# PASS_TO_PASS (behaviour that must not regress) by pytest node id. The reward is 1 only when
# every listed test ran and passed; a suite that did not run, or whose exit code disagrees with
# its report, scores 0. Components: the passed fraction of each list.
set -u
mkdir -p /logs/verifier
cd /app
python -m pytest /tests/feature /tests/regression --rootdir=/tests -p no:cacheprovider -rA \
    -o junit_family=xunit1 --junitxml=/logs/verifier/junit.xml
status=$?
STATUS=$status python - <<'PY'
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

config = json.loads(Path("/tests/config.json").read_text())
junit = Path("/logs/verifier/junit.xml")
status = int(os.environ["STATUS"])
outcomes: dict[str, str] = {}
if junit.is_file():
    for case in ET.parse(junit).iter("testcase"):
        node = f"{case.get('file')}::{case.get('name')}"
        failed = any(case.find(tag) is not None for tag in ("failure", "error"))
        skipped = case.find("skipped") is not None
        outcomes[node] = "failed" if failed else "skipped" if skipped else "passed"


def fraction(ids: list[str], allow_skipped: bool) -> float:
    good = {"passed", "skipped"} if allow_skipped else {"passed"}
    return sum(outcomes.get(i) in good for i in ids) / len(ids) if ids else 1.0


f2p = fraction(config["FAIL_TO_PASS"], allow_skipped=False)
p2p = fraction(config["PASS_TO_PASS"], allow_skipped=True)
any_failed = any(v == "failed" for v in outcomes.values())
consistent = bool(outcomes) and (status == 0) == (not any_failed) and status in (0, 1)
resolved = consistent and f2p == 1.0 and p2p == 1.0
reward = {
    "reward": 1.0 if resolved else 0.0,
    "fail_to_pass": f2p,
    "pass_to_pass": p2p,
    "suite_consistent": 1.0 if consistent else 0.0,
}
Path("/logs/verifier/reward.json").write_text(json.dumps(reward) + "\n")
print(f"pytest exit status {status}; reward: {reward}")
PY
