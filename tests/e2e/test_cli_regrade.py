"""`envfarm regrade` as a user runs it: a real run, then its rewards recomputed from artifacts."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def envfarm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envfarm", *args],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=REPO,
        check=False,
    )


def lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]


def test_regrade_reproduces_a_run_and_follows_a_changed_task(tmp_path: Path) -> None:
    task = tmp_path / "tasks" / "lru"
    shutil.copytree(REPO / "tasks" / "fix-lru-cache", task)
    out = tmp_path / "run"
    proc = envfarm("run", str(task), "--group-size", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    original = lines(out)
    assert [t["reward"]["value"] for t in original] == [1.0, 1.0]
    for trajectory in original:
        root = out / trajectory["artifacts"]
        assert (root / "verifier" / "junit.xml").is_file()
        assert (root / "inspection.json").is_file()

    same = tmp_path / "same"
    proc = envfarm("regrade", str(out), "--out", str(same))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert lines(same) == original
    summary, before = (json.loads((d / "summary.json").read_text()) for d in (same, out))
    assert summary == before
    report = json.loads((same / "regrade.json").read_text())
    assert [entry["changed"] for entry in report["regraded"]] == [False, False]

    toml = task / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            "[verifier]\n",
            '[verifier]\nfail_to_pass = ["test_lru.py::test_basic_get_and_put", '
            '"test_lru.py::test_not_written_yet"]\n',
        )
    )
    proc = envfarm("regrade", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    regraded = lines(out)
    for old, new in zip(original, regraded, strict=True):
        assert new["reward"]["valid"] is True
        assert new["reward"]["value"] == 0.0
        assert new["reward"]["components"]["fail_to_pass"] == 0.5
        assert new["reward"]["components"]["verifier_reward"] == 1.0
        assert "not in any report: test_lru.py::test_not_written_yet" in new["reward"]["reason"]
        assert new["advantage"] == 0.0
        assert new["group_zero_variance"] is True
        assert {k: v for k, v in new.items() if k != "reward"} == {
            k: v for k, v in old.items() if k != "reward"
        }
    assert json.loads((out / "summary.json").read_text())["mean_reward"] == 0.0
    backups = sorted(p.name for p in out.iterdir() if ".bak-" in p.name)
    assert [name.split(".bak-")[0] for name in backups] == ["summary.json", "trajectories.jsonl"]
    backup = (out / backups[1]).read_text().splitlines()
    assert [json.loads(line) for line in backup] == original
    assert json.loads((out / "regrade.json").read_text())["regraded"][0]["changed"] is True


def test_regrade_refuses_a_directory_without_a_run(tmp_path: Path) -> None:
    proc = envfarm("regrade", str(tmp_path))
    assert proc.returncode == 2
    assert "trajectories.jsonl does not exist" in proc.stderr
