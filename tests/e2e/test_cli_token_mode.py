"""`envfarm run --token-mode` against a fake llama.cpp engine, and what it refuses up front."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envfarm.policy import PolicyServer
from envfarm.testing.fake_engine import FakeEngine
from envfarm.testing.scripted import ScriptedResponder, Step, completion, tool_call
from tests.e2e.cli import envfarm
from tests.e2e.test_cli_tokens import write_fix_command

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_token_mode_run_gives_one_merged_sample_per_episode(tmp_path: Path) -> None:
    steps: list[Step] = [
        completion("Writing the fix.", tool_call("bash", {"command": write_fix_command()})),
        tool_call("submit", {}),
    ]
    out = tmp_path / "out"
    async with FakeEngine(steps) as engine:
        code, stderr = await envfarm(
            "run", "tasks/fix-lru-cache", "--policy", engine.base_url, "--model", "m",
            "--token-mode", "--samples", "--out", str(out),
        )  # fmt: skip
    assert code == 0, stderr[-3000:]
    (trajectory,) = [json.loads(line) for line in (out / "trajectories.jsonl").open()]
    assert trajectory["reward"]["valid"] is True
    assert trajectory["reward"]["value"] == 1.0
    turns = trajectory["turns"]
    assert [t["request_mode"] for t in turns] == ["tokens", "tokens"]
    assert [t["server_profile"] for t in turns] == ["llamacpp", "llamacpp"]
    assert engine.prompts == [t["prompt_token_ids"] for t in turns]
    (sample,) = trajectory["samples"]
    assert sample["token_ids"] == engine.prompts[1] + turns[1]["completion_token_ids"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["samples"] == {"built": 1, "why_none": None}


async def test_token_mode_against_a_text_only_server_is_refused_before_the_job(
    tmp_path: Path,
) -> None:
    responder = ScriptedResponder([tool_call("submit", {})])
    async with PolicyServer(responder) as server:
        code, stderr = await envfarm(
            "run", "tasks/fix-lru-cache", "--policy", server.base_url, "--token-mode",
            "--out", str(tmp_path / "out"),
        )  # fmt: skip
    assert code == 2, stderr[-3000:]
    assert "cannot take a prompt of token ids" in stderr
    assert responder.requests == []


async def test_samples_from_a_text_only_server_say_why_there_are_none(tmp_path: Path) -> None:
    responder = ScriptedResponder([tool_call("submit", {})])
    out = tmp_path / "out"
    async with PolicyServer(responder) as server:
        code, stderr = await envfarm(
            "run", "tasks/fix-lru-cache", "--policy", server.base_url, "--server-profile",
            "openai", "--samples", "--out", str(out),
        )  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    assert summary["samples"]["built"] == 0
    assert "token_source none" in summary["samples"]["why_none"]
    assert code in (0, 1), stderr[-3000:]
