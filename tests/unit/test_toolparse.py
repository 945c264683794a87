"""Tool calls read from sampled text, the profile probe, and --samples' explanation."""

from __future__ import annotations

import json

import pytest

from envfarm.models.samples import samples_report
from envfarm.models.trajectory import Provenance, Trajectory, Turn
from envfarm.policy.toolparse import UNREADABLE, parse_tool_calls
from envfarm.testing.fake_engine import EngineDialect, FakeEngine
from tests.unit.test_llamacpp_and_token_mode import pool_on


def test_hermes_calls_pretty_printed_and_several() -> None:
    text = (
        'Let me look.\n<tool_call>\n{\n  "name": "bash",\n  "arguments": {"command": "ls"}\n}'
        '\n</tool_call>\n<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'
    )
    content, calls = parse_tool_calls(text, prefix="call_3")
    assert content == "Let me look."
    assert [(c.id, c.name) for c in calls] == [("call_3_0", "bash"), ("call_3_1", "submit")]
    assert json.loads(calls[0].arguments) == {"command": "ls"}


def test_a_hermes_call_cut_short_keeps_its_raw_arguments() -> None:
    text = '<tool_call>\n{"name": "write_file", "arguments": {"path": "a.py", "content": "imp'
    content, calls = parse_tool_calls(text)
    assert content is None
    assert calls[0].name == "write_file"
    assert calls[0].arguments == '{"path": "a.py", "content": "imp'


def test_a_call_without_a_readable_name_is_still_a_call() -> None:
    _, calls = parse_tool_calls('<tool_call>\n{"na')
    assert calls[0].name == UNREADABLE


def test_fenced_json_and_llama_json() -> None:
    fenced = 'I will run it.\n```json\n{"name": "bash", "arguments": {"command": "pwd"}}\n```'
    content, calls = parse_tool_calls(fenced)
    assert content == "I will run it."
    assert calls[0].name == "bash"
    llama = '<|python_tag|>{"name": "bash", "parameters": {"command": "id"}}'
    content, calls = parse_tool_calls(llama, "llama")
    assert content is None
    assert json.loads(calls[0].arguments) == {"command": "id"}


def test_plain_text_and_unrelated_code_are_content() -> None:
    assert parse_tool_calls("All done.") == ("All done.", [])
    code = "Here:\n```json\n[1, 2]\n```"
    assert parse_tool_calls(code) == (code, [])
    assert parse_tool_calls('{"a": 1}') == ('{"a": 1}', [])


@pytest.mark.parametrize(
    ("dialect", "said"),
    [("llamacpp", "/props"), ("vllm", "/version"), ("sglang", "/get_server_info")],
)
async def test_auto_probes_each_servers_own_api(dialect: EngineDialect, said: str) -> None:
    async with FakeEngine([], dialect=dialect) as engine, pool_on(engine) as pool:
        await pool.preflight()
        client = pool.helper_client()
    assert client.tokens.profile == dialect
    assert said in client.tokens.reason


def _trajectory(turns: list[Turn]) -> Trajectory:
    return Trajectory(
        trajectory_id="t",
        episode_id="e",
        job_id="j",
        group_id="g",
        task_id="task",
        turns=turns,
        provenance=Provenance(task_hash="h", envfarm_version="0"),
    )


def test_samples_report_says_why_nothing_was_built() -> None:
    assert samples_report([]) == (0, "no episode ran")
    built, why = samples_report([_trajectory([])])
    assert built == 0
    assert why is not None
    assert "no episode has a model turn" in why
    built, why = samples_report([_trajectory([Turn(index=0, token_source="none")])])
    assert why is not None
    assert "token_source none" in why
    good = Turn(index=0, prompt_token_ids=[1, 2], completion_token_ids=[3], logprobs=[-0.1])
    assert samples_report([_trajectory([good])]) == (1, None)
