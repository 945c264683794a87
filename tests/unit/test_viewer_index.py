"""Indexing run directories: entries read from a line's head and tail, byte offsets, a run
that grows, a torn last line, bad lines, and the figures computed from the entries."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envfarm.models.trajectory import Trajectory
from envfarm.testing.runs import synthetic_trajectory, write_synthetic_run
from envfarm.viewer.entries import NotATrajectory, entry_of, entry_of_line
from envfarm.viewer.index import FileIndex, RunDirError, trajectories_file
from envfarm.viewer.session import session
from envfarm.viewer.stats import by_policy_version, histogram, pass_at_k, pass_ks, task_rows


def one(**fields: Any) -> Trajectory:
    base = {"job_id": "job-1", "group_id": "grp-1", "task_id": "t", "number": 1, "reward": 1.0}
    return synthetic_trajectory(random.Random(1), **{**base, **fields})


def test_the_entry_of_a_line_is_the_same_read_fast_or_parsed_whole() -> None:
    trajectory = one(flagged=True, tokens=True, summarized=True, turns=5)
    trajectory.advantage = 0.5
    line = trajectory.to_json().encode()
    fast = entry_of_line(line)
    whole = entry_of(json.loads(line))
    reordered = entry_of_line(json.dumps(json.loads(line), sort_keys=True).encode())
    assert fast == whole == reordered
    assert (fast.task_id, fast.value, fast.valid, fast.advantage) == ("t", 1.0, True, 0.5)
    assert fast.flags == ["tamper:tests_modified"]
    assert fast.turns == 5
    assert fast.policy_version == "1"


def test_a_message_quoting_the_reward_key_does_not_fool_the_fast_path() -> None:
    trajectory = one(reward=0.0)
    trajectory.messages.append({"role": "tool", "content": '"reward":{"value":1.0},"provenance"'})
    assert entry_of_line(trajectory.to_json().encode()).value == 0.0


def test_json_that_is_no_trajectory_is_refused() -> None:
    with pytest.raises(NotATrajectory):
        entry_of_line(b'{"hello": 1}')
    with pytest.raises(ValueError, match="Expecting property name"):
        entry_of_line(b"{not json")


def test_a_growing_run_is_indexed_by_what_was_appended_and_a_torn_line_waits(
    tmp_path: Path,
) -> None:
    written = write_synthetic_run(tmp_path, 8, group_size=4)
    path = tmp_path / "trajectories.jsonl"
    index = FileIndex(path)
    assert index.refresh() is True
    assert [e.trajectory_id for e in index.entries] == [t.trajectory_id for t in written]
    assert index.read(index.entries[5])["trajectory_id"] == written[5].trajectory_id
    assert index.refresh() is False

    extra_trajectory = one(number=99)
    extra = extra_trajectory.to_json()
    wanted = extra_trajectory.trajectory_id
    with path.open("a") as handle:
        handle.write(extra[:100])  # the writer is in the middle of a line
    index.refresh()
    assert len(index.entries) == 8
    assert index.torn is not None
    assert "line 9" in index.torn
    with path.open("a") as handle:
        handle.write(extra[100:] + "\n{broken\n")
    index.refresh()
    assert index.torn is None
    assert [e.trajectory_id for e in index.entries][-1] == wanted
    assert index.read(index.entries[8])["trajectory_id"] == wanted
    assert len(index.notes) == 1
    assert index.notes[0].startswith("trajectories.jsonl line 10 is skipped:")


def test_a_rewritten_file_is_indexed_anew(tmp_path: Path) -> None:
    write_synthetic_run(tmp_path, 8)
    index = FileIndex(tmp_path / "trajectories.jsonl")
    index.refresh()
    write_synthetic_run(tmp_path, 3, seed=2)  # shorter: --resume rewrote it
    index.refresh()
    assert len(index.entries) == 3


def test_a_directory_without_trajectories_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(RunDirError, match=f"{tmp_path} has no trajectories.jsonl"):
        trajectories_file(tmp_path)
    with pytest.raises(RunDirError, match="is not a directory"):
        trajectories_file(tmp_path / "missing")


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    assert pass_at_k(4, 0, 1) == 0.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(4, 3, 2) == 1.0
    assert pass_at_k(2, 1, 4) is None


def test_task_rows_histograms_and_versions(tmp_path: Path) -> None:
    written = write_synthetic_run(tmp_path, 40, group_size=4, tasks=2)
    index = FileIndex(tmp_path / "trajectories.jsonl")
    index.refresh()
    rows = task_rows(index.entries)
    assert [r.task_id for r in rows] == ["task-000", "task-001"]
    assert sum(r.episodes for r in rows) == 40
    valid = [t for t in written if t.reward.valid]
    assert sum(r.valid for r in rows) == len(valid)
    assert sum(r.passed for r in rows) == sum(1 for t in valid if t.reward.value == 1.0)
    assert pass_ks(rows) == [1, 2, 4, 8]
    low, high, counts = histogram([0.0, 0.05, 1.0, 1.0])
    assert (low, high, counts[0], counts[-1], sum(counts)) == (0.0, 1.0, 2, 2, 4)
    entries = index.entries
    for entry, version in zip(entries, ["10", "9", "2"] * 20, strict=False):
        entry.policy_version = version
    assert [v for v, _, _ in by_policy_version(entries)] == ["2", "9", "10"]


def test_the_session_puts_each_message_with_its_turn_across_segments() -> None:
    trajectory = one(turns=5, summarized=True)
    document = json.loads(trajectory.to_json())
    segments = session(document)
    assert [s.index for s in segments] == [0, 1]
    assert [(v.turn or {}).get("index") for v in segments[0].turns] == [0, 1, 2]
    assert [(v.turn or {}).get("index") for v in segments[1].turns] == [3, 4]
    assert segments[1].record is not None
    assert segments[1].record["first_turn"] == 3
    assert [m["role"] for m in segments[0].opening] == ["system", "user"]
    assert all(
        v.message is not None and v.after[0]["role"] == "tool" for s in segments for v in s.turns
    )


def test_envfarm_view_refuses_a_directory_without_trajectories(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "envfarm", "view", str(tmp_path), "--no-open"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert f"{tmp_path} has no trajectories.jsonl" in proc.stderr
