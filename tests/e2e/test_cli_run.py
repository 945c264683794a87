"""`envfarm run` as a user runs it: a subprocess on the example tasks and the real engine."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import docker
import pytest

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "tasks"
EXAMPLE_TASKS = sorted(p.name for p in TASKS.iterdir() if (p / "task.toml").is_file())


def envfarm(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envfarm", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        check=False,
    )


def read_run(out: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    summary = json.loads((out / "summary.json").read_text())
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    return summary, [json.loads(line) for line in lines]


def test_oracle_scores_one_on_every_example_task(tmp_path: Path) -> None:
    assert len(EXAMPLE_TASKS) >= 3
    out = tmp_path / "oracle"
    proc = envfarm("run", "tasks/", "--policy", "oracle", "--out", str(out), "--concurrency", "4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no model is being trained or evaluated" in proc.stderr
    summary, trajectories = read_run(out)
    assert summary["episodes"] == len(EXAMPLE_TASKS) == len(trajectories)
    assert summary["completed"] == summary["episodes"]
    assert summary["infra_errors"] == 0
    assert summary["mean_reward"] == 1.0
    assert all(task["mean_reward"] == 1.0 for task in summary["tasks"].values())
    for trajectory in trajectories:
        assert trajectory["schema"] == "envfarm.trajectory/1"
        assert trajectory["reward"]["valid"] is True
        calls = [
            c["function"]["name"] for m in trajectory["messages"] for c in m.get("tool_calls") or []
        ]
        assert calls == ["bash", "submit"]
        assert trajectory["turns"][0]["tool_results"][0]["exit_code"] == 0
        assert all(
            trajectory["timings"][k] is not None
            for k in ("build_s", "provision_s", "agent_s", "grading_s", "teardown_s")
        )
    assert "mean reward" in proc.stderr


def test_nop_scores_below_one_on_every_task_and_exits_zero(tmp_path: Path) -> None:
    out = tmp_path / "nop"
    proc = envfarm("run", "tasks/", "--policy", "nop", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary, trajectories = read_run(out)
    assert summary["completed"] == summary["episodes"] == len(EXAMPLE_TASKS)
    assert all(task["mean_reward"] < 1.0 for task in summary["tasks"].values())
    assert all(t["outcome"]["stop_reason"] == "submitted" for t in trajectories)


def test_bad_task_exits_two_and_the_good_ones_still_run(tmp_path: Path) -> None:
    shutil.copytree(TASKS / "fix-lru-cache", tmp_path / "tasks" / "good")
    bad = tmp_path / "tasks" / "bad"
    shutil.copytree(TASKS / "fix-lru-cache", bad)
    (bad / "task.toml").write_text('[task]\nname = "x/bad"\n[environment]\ncpus = "two"\n')
    ubuntu = tmp_path / "tasks" / "ubuntu"
    shutil.copytree(TASKS / "fix-lru-cache", ubuntu)
    (ubuntu / "task.toml").write_text('[task]\nname = "x/ubuntu"\n')
    (ubuntu / "environment" / "Dockerfile").write_text("FROM alpine:3.22\n")
    out = tmp_path / "out"
    proc = envfarm("run", str(tmp_path / "tasks"), "--out", str(out), "--group-size", "2")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "environment.cpus" in proc.stderr
    assert "alpine:3.22" in proc.stderr
    summary, trajectories = read_run(out)
    assert summary["episodes"] == 2
    assert summary["tasks"]["envfarm/fix-lru-cache"]["mean_reward"] == 1.0
    assert len(summary["bad_inputs"]) == 2
    assert len({t["group_id"] for t in trajectories}) == 1
    assert all(t["advantage"] == 0.0 and t["group_zero_variance"] for t in trajectories)


def test_unreachable_endpoint_is_an_infra_error_and_the_key_is_never_written(
    tmp_path: Path,
) -> None:
    out = tmp_path / "down"
    secret = "sk-test-secret-key-123"
    proc = envfarm(
        "run",
        "tasks/fix-lru-cache",
        "--policy",
        "http://127.0.0.1:9/v1",
        "--model",
        "m",
        "--api-key",
        secret,
        "--retries",
        "0",
        "--out",
        str(out),
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    summary, [trajectory] = read_run(out)
    assert summary["infra_errors"] == 1
    assert trajectory["reward"] == {
        "value": None,
        "valid": False,
        "components": {},
        "flags": [],
        "reason": trajectory["reward"]["reason"],
        "flag_details": {},
        "tests": [],
    }
    assert trajectory["artifacts"] is None  # no grading ran: nothing kept
    assert trajectory["error"]["phase"] == "agent"
    written = b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
    assert (out / "envfarm.db").is_file()  # the run's store holds no key either
    assert secret not in proc.stdout + proc.stderr
    assert secret.encode() not in written


def test_check_and_help() -> None:
    assert envfarm("check", "tasks/", "--no-run").returncode == 0
    assert envfarm("check", "does-not-exist/").returncode == 2
    help_text = envfarm("run", "--help").stdout
    for flag in (
        "--policy",
        "--model",
        "--group-size",
        "--concurrency",
        "--out",
        "--temperature",
        "--top-p",
        "--max-tokens",
        "--seed",
        "--api-key",
    ):
        assert flag in help_text


@pytest.mark.parametrize("flag", ["--temperature=-1", "--top-p=2"])
def test_bad_sampling_flags_are_rejected(flag: str) -> None:
    proc = envfarm("run", "tasks/fix-lru-cache", flag)
    assert proc.returncode == 2
    assert "Invalid value" in proc.stderr or "Error" in proc.stderr


def test_a_warm_pool_run_grades_every_episode_and_leaves_no_sandbox(tmp_path: Path) -> None:
    out = tmp_path / "pooled"
    args = ["--group-size", "3", "--concurrency", "1", "--warm-pool", "2", "--out", str(out)]
    proc = envfarm("run", "tasks/word-count-cli", *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary, trajectories = read_run(out)
    assert summary["completed"] == 3
    assert all(t["reward"]["value"] == 1.0 for t in trajectories)
    assert sum(t["timings"]["provision_s"] for t in trajectories) > 0
    label = f"io.envfarm.run={out.name}"
    assert docker.from_env().containers.list(all=True, filters={"label": label}) == []
