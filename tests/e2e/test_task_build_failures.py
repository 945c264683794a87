"""A build failure the task causes, through ``envfarm run`` and ``envfarm check``: exit 2 with
the task's own line and the substitutions, built once, never counted as infrastructure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "tests" / "fixtures" / "tasks" / "missing-copy-source"
OWN_LINE = "line 3: COPY requirements.txt /app/"
SUBSTITUTED = "substitutions: python:3.12-slim by envfarm's recipe "


def _envfarm(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "envfarm", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)


def test_run_exits_2_with_the_tasks_line_and_no_retry(tmp_path: Path) -> None:
    proc = _envfarm("run", str(TASK), "--policy", "oracle", "--out", str(tmp_path / "run"))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output[-3000:]
    assert OWN_LINE in output
    assert SUBSTITUTED in output
    assert "retrying" not in output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["infra_errors"] == 0
    (line,) = (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()
    trajectory = json.loads(line)
    assert trajectory["reward"]["valid"] is False
    assert trajectory["error"]["type"] == "TaskBuildError"
    assert trajectory["error"]["infrastructure"] is False


def test_check_exits_2_naming_the_line_and_the_substitutions() -> None:
    proc = _envfarm("check", str(TASK), "--runs", "1")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output[-3000:]
    assert (
        f"problem build: task fixtures/missing-copy-source (environment/Dockerfile): {OWN_LINE}"
        in (output)
    )
    assert SUBSTITUTED in output
