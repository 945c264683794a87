"""Sizing the next prompt against the context budget, and where the budget comes from."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any

import pytest

from envfarm.agent.context import (
    CHARS_PER_TOKEN,
    TOKENS_PER_MESSAGE,
    ContextMeter,
    message_chars,
    resumed_instruction,
    server_count,
)
from envfarm.controller.episode import EpisodeRequest, EpisodeRunner
from envfarm.controller.policies import ResolvedPolicy
from envfarm.errors import TaskSpecError
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.policy import CaptureOptions, OpenAIPolicy, PolicyServer
from envfarm.policy.base import Completion
from envfarm.policy.tokens import TokenData
from envfarm.sandbox.base import ExecResult
from envfarm.spec.task import load_task
from envfarm.spec.task_toml import parse_task_config, read_task_config
from envfarm.testing.fake_sandbox import FakeBackend, ok
from envfarm.testing.fake_vllm import FakeVLLM
from tests.plans import sandbox_spec

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
START = [{"role": "system", "content": "s" * 30}, {"role": "user", "content": "u" * 60}]


def answer(
    usage: dict[str, int] | None = None, tokens: TokenData | None = None, content: str = "ok"
) -> Completion:
    message = {"role": "assistant", "content": content}
    return Completion(
        content=content,
        tool_calls=[],
        finish_reason="stop",
        usage=usage,
        latency_s=0.0,
        endpoint="http://127.0.0.1:1/v1",
        model="m",
        message=message,
        sampling={},
        tokens=tokens,
    )


def estimate(chars: int, messages: int) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE * messages


def test_without_server_counts_the_whole_context_is_estimated_tools_included() -> None:
    meter = ContextMeter(TOOLS)
    size, estimated = meter.next_prompt(START)
    assert estimated
    assert size == estimate(meter.tools_chars + 90, 2)


def test_server_counts_are_used_and_only_what_follows_is_estimated() -> None:
    meter = ContextMeter(TOOLS)
    messages = [*START]
    completion = answer(tokens=TokenData(prompt_token_ids=[1] * 500, completion_token_ids=[2] * 20))
    messages.append(completion.message)
    meter.observe(messages, completion)
    assert meter.next_prompt(messages) == (520, False)
    messages.append({"role": "tool", "tool_call_id": "c", "content": "x" * 31})
    assert meter.next_prompt(messages) == (520 + estimate(31, 1), True)


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        ({"prompt_tokens": 700, "completion_tokens": 12, "total_tokens": 712}, 712),
        ({"total_tokens": 90}, 90),
        ({"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}, None),
        (None, None),
    ],
)
def test_usage_counts_when_the_server_gives_no_token_ids(
    usage: dict[str, int] | None, expected: int | None
) -> None:
    assert server_count(answer(usage=usage)) == expected


def test_a_call_without_counts_falls_back_to_estimating_everything() -> None:
    meter = ContextMeter(TOOLS)
    messages = [*START]
    first = answer(usage={"prompt_tokens": 400, "completion_tokens": 2, "total_tokens": 402})
    messages.append(first.message)
    meter.observe(messages, first)
    second = answer(usage=None, content="abc")
    messages.append(second.message)
    meter.observe(messages, second)
    assert meter.next_prompt(messages) == (estimate(meter.tools_chars + 90 + 2 + 3, 4), True)
    meter.restart()
    assert meter.next_prompt(START) == (estimate(meter.tools_chars + 90, 2), True)


def test_tool_calls_count_their_name_and_arguments() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": '{"a": 1}'}}
    assert message_chars({"role": "assistant", "content": None, "tool_calls": [call]}) == 4 + 8
    assert message_chars({"role": "user", "content": [{"type": "text", "text": "hey"}]}) == 3


def test_the_resumed_context_keeps_the_instruction_first() -> None:
    text = resumed_instruction("Do the thing.\n", "  I did half.\n")
    assert text.startswith("Do the thing.\n\n")
    assert "I did half.\n\nContinue from there." in text


def test_task_toml_context_budget_is_an_envfarm_extension_validated_strictly() -> None:
    def parse(toml: str) -> Any:
        return parse_task_config(tomllib.loads(toml), "task.toml")

    assert parse("[agent]\ncontext_budget_tokens = 32000\n").agent.context_budget_tokens == 32000
    assert parse("").agent.context_budget_tokens is None
    for bad in ("0", '"32k"', "1.5", "true"):
        with pytest.raises(TaskSpecError, match="context_budget_tokens"):
            parse(f"[agent]\ncontext_budget_tokens = {bad}\n")
    misspelt = read_task_config(tomllib.loads("[agent]\ncontext_budget = 100\n"), "task.toml")
    assert misspelt.config.agent.context_budget_tokens is None
    assert misspelt.unknown == {"agent.context_budget": 100}
    assert "did you mean 'context_budget_tokens'?" in misspelt.warnings[0].message


def make_task(root: Path, budget: int | None) -> Any:
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    agent = f"[agent]\ncontext_budget_tokens = {budget}\n" if budget else ""
    # shared: the fake sandbox grades in place (it has no files to carry to a fresh container)
    verifier = '[verifier]\nenvironment_mode = "shared"\n'
    (root / "task.toml").write_text(agent + verifier + '[environment]\nworkdir = "/app"\n')
    (root / "instruction.md").write_text("Run the steps.\n")
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "tests" / "test.sh").write_text("true\n")
    return load_task(root)


@pytest.mark.parametrize(
    ("run_budget", "task_budget", "used"),
    [(3000, None, 3000), (None, 2500, 2500), (3000, 2500, 2500), (2500, 3000, 2500)],
)
async def test_an_episode_uses_the_smaller_of_the_run_and_task_budgets(
    tmp_path: Path, run_budget: int | None, task_budget: int | None, used: int
) -> None:
    task = make_task(tmp_path / "t", task_budget)
    backend = FakeBackend()

    def handler(command: str) -> ExecResult:
        if "/tests/test.sh" in command:
            backend.created[-1].files["/logs/verifier/reward.txt"] = b"1\n"
        return ok()

    backend.handler = handler
    fake = FakeVLLM(commands=[f"echo {i}" for i in range(40)])
    async with (
        PolicyServer(fake) as server,
        OpenAIPolicy(server.base_url, "m", capture=CaptureOptions(profile="vllm")) as client,
    ):
        runner = EpisodeRunner(
            backend=backend,
            policy=ResolvedPolicy(client, "fake", "m", needs_solution=False),
            grader=TestScriptGrader(),
            run_id="budget",
            max_turns=100,
            context_budget=run_budget,
        )
        image = await backend.prepare(sandbox_spec(task))
        request = EpisodeRequest(task=task, image=image, job_id="j", group_id="g", episode_id="e")
        trajectory = await runner.run(request)
    assert trajectory.error is None
    assert trajectory.reward.valid
    assert trajectory.segments
    assert {s.context_budget for s in trajectory.segments} == {used}
    assert [s.index for s in trajectory.segments] == list(range(1, len(trajectory.segments) + 1))
    assert trajectory.turns[-1].segment == len(trajectory.segments)
