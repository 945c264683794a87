"""Exporting trajectories from a run directory to JSONL and Parquet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from envfarm.cli.main import cli
from envfarm.client.export import ExportError, TrajectoryWriter, read_jsonl
from envfarm.models.trajectory import Provenance, Reward, Trajectory, Turn


def trajectory(index: int) -> dict[str, Any]:
    item = Trajectory(
        trajectory_id=f"t{index}",
        episode_id=f"e{index}",
        job_id="run",
        group_id="g0",
        task_id="demo",
        messages=[{"role": "user", "content": "hi\nthere"}],
        turns=[Turn(index=0, prompt_token_ids=[1, 2], completion_token_ids=[3], logprobs=[-0.5])],
        reward=Reward(value=0.5 * index, valid=True, components={"tests": 0.5 * index}),
        advantage=None if index == 0 else 1.0,
        provenance=Provenance(task_hash="abc", envfarm_version="0"),
    )
    data: dict[str, Any] = json.loads(item.to_json())
    return data


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    lines = [json.dumps(trajectory(i)) for i in range(3)]
    lines[2] = json.dumps({**trajectory(2), "added_later": {"k": 1}})
    (tmp_path / "trajectories.jsonl").write_text("\n".join(lines) + "\n\n")
    return tmp_path


def test_run_dir_to_parquet_and_jsonl(run_dir: Path, tmp_path: Path) -> None:
    for name in ("out.parquet", "out.jsonl"):
        result = CliRunner().invoke(cli, ["export", str(run_dir), "--out", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        assert "exported 3 trajectories" in result.output
    source = list(read_jsonl(run_dir))
    exported = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert exported == source
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.schema.field("attempt").type == "int64"
    assert table.schema.field("reward_valid").type == "bool"
    rows = table.to_pylist()
    assert [row["trajectory_id"] for row in rows] == ["t0", "t1", "t2"]
    assert [row["reward_value"] for row in rows] == [0.0, 0.5, 1.0]
    assert [row["advantage"] for row in rows] == [None, 1.0, 1.0]
    assert rows[0]["num_turns"] == 1
    assert rows[0]["cursor"] is None
    for row, original in zip(rows, source, strict=True):
        assert json.loads(row["turns"]) == original["turns"]
        assert json.loads(row["messages"]) == original["messages"]
        assert json.loads(row["reward"]) == original["reward"]
    assert rows[0]["extra"] is None
    assert json.loads(rows[2]["extra"]) == {"added_later": {"k": 1}}


def test_parquet_row_groups_cover_many_trajectories(tmp_path: Path) -> None:
    with TrajectoryWriter(tmp_path / "many.parquet") as out:
        for index in range(600):
            out.write(trajectory(index % 3))
    assert out.count == 600
    assert pq.read_metadata(tmp_path / "many.parquet").num_rows == 600


def test_bad_inputs_are_named(tmp_path: Path, run_dir: Path) -> None:
    with pytest.raises(ExportError, match=r"\.jsonl or \.parquet"):
        TrajectoryWriter(tmp_path / "out.csv")
    (tmp_path / "broken.jsonl").write_text('{"trajectory_id": "a"}\nnot json\n')
    with pytest.raises(ExportError, match=r"broken\.jsonl:2"):
        list(read_jsonl(tmp_path / "broken.jsonl"))
    out = tmp_path / "x.jsonl"
    result = CliRunner().invoke(cli, ["export", str(tmp_path / "nowhere"), "--out", str(out)])
    assert result.exit_code == 2
    assert "no such file" in result.output
    result = CliRunner().invoke(cli, ["export", str(tmp_path / "broken.jsonl"), "--out", str(out)])
    assert result.exit_code == 2
    assert not out.exists()
    assert list(tmp_path.glob("x.jsonl*")) == []
    result = CliRunner().invoke(cli, ["export", "--out", str(out)])
    assert result.exit_code == 2
    assert "either SOURCE" in result.output
