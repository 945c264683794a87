"""`envfarm run` against a vLLM-style server: trajectories a trainer uses without re-tokenizing.

The fake vLLM server runs in this process on loopback and drives the task like an oracle that
knows the fix (it writes the reference `lru.py` with `bash`, then submits), answering with
token ids, logprobs and a version header; `envfarm run` runs as a user runs it.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from envfarm.policy import PolicyServer
from envfarm.testing.fake_vllm import FakeVLLM
from tests.e2e.cli import envfarm

pytestmark = pytest.mark.asyncio(loop_scope="session")

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "tasks" / "fix-lru-cache"


def write_fix_command() -> str:
    source = (TASK / "solution" / "lru.py").read_text()
    return f"printf %s {shlex.quote(source)} > /app/lru.py && python3 -c 'import lru'"


async def test_run_against_a_vllm_style_server_writes_exact_token_data(tmp_path: Path) -> None:
    fake = FakeVLLM(commands=[write_fix_command()], version="41")
    out = tmp_path / "out"
    async with PolicyServer(fake) as server:
        code, stderr = await envfarm(
            "run",
            "tasks/fix-lru-cache",
            "--policy",
            server.base_url,
            "--model",
            "m",
            "--group-size",
            "2",
            "--samples",
            "--out",
            str(out),
        )
    assert code == 0, stderr[-3000:]
    trajectories = [
        json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()
    ]
    assert len(trajectories) == 2
    assert len({t["group_id"] for t in trajectories}) == 1
    sent = {
        (
            tuple(reply.body["prompt_token_ids"]),
            tuple(reply.body["choices"][0]["token_ids"]),
            tuple(c["logprob"] for c in reply.body["choices"][0]["logprobs"]["content"]),
        )
        for reply in fake.replies
        if isinstance(reply.body, dict)
    }
    assert len(fake.requests) == 4
    assert fake.requests[0]["return_token_ids"] is True
    for trajectory in trajectories:
        assert trajectory["reward"]["valid"] is True
        assert trajectory["reward"]["value"] == 1.0
        assert trajectory["policy_versions"] == {"min": "41", "max": "41"}
        turns = trajectory["turns"]
        assert [
            c["function"]["name"] for m in trajectory["messages"] for c in m.get("tool_calls") or []
        ] == ["bash", "submit"]
        for turn in turns:
            assert turn["token_source"] == "vllm"
            assert turn["policy_version"] == "41"
            key = (
                tuple(turn["prompt_token_ids"]),
                tuple(turn["completion_token_ids"]),
                tuple(turn["logprobs"]),
            )
            assert key in sent
        (sample,) = trajectory["samples"]
        ids, mask = sample["token_ids"], sample["loss_mask"]
        assert ids == turns[-1]["prompt_token_ids"] + turns[-1]["completion_token_ids"]
        sampled = bytes(t for t, m in zip(ids, mask, strict=True) if m).decode()
        assert sampled.count("<tool_call>") == 2
        assert "submit" in sampled
        context = bytes(t for t, m in zip(ids, mask, strict=True) if not m).decode()
        assert "implements `LRUCache`" in context  # the instruction, as the model saw it


async def test_a_turn_without_token_data_is_asked_again_warned_and_counted(tmp_path: Path) -> None:
    """The server omits the token data of the second turn's answer, and again when asked: the
    run warns once, keeps the turn without token data, and still grades the episode."""
    fake = FakeVLLM(commands=[write_fix_command()], faults={1: "omit", 2: "omit"})
    out = tmp_path / "out"
    async with PolicyServer(fake) as server:
        code, stderr = await envfarm(
            "run",
            "tasks/fix-lru-cache",
            "--policy",
            server.base_url,
            "--model",
            "m",
            "--samples",
            "--out",
            str(out),
        )
    assert code == 0, stderr[-3000:]
    assert stderr.count("an answer came without its token data") == 1, stderr[-3000:]
    (trajectory,) = [
        json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()
    ]
    assert trajectory["reward"]["valid"] is True
    assert trajectory["reward"]["value"] == 1.0
    first, kept = trajectory["turns"]
    assert first["token_source"] == "vllm"
    assert kept["token_source"] == "none"
    assert kept["faults"] == []
    assert "prompt_token_ids is missing" in kept["token_reask"]
    assert "still lacked" in kept["token_source_reason"]
    assert [s["turns"] for s in trajectory["samples"]] == [[0]]
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["token_reasks"], summary["turns_without_token_data"]) == (1, 1)
    assert summary["infra_errors"] == 0
