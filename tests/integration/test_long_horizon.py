"""Long sessions with self-summarization, through the real agent loop.

The policy is the fake vLLM server over loopback HTTP (its byte tokenizer makes every prompt's
ids checkable by eye); the sandbox is the in-memory fake, so 300 turns take seconds.
"""

from __future__ import annotations

import json
from typing import Any

from envfarm.agent.context import SUMMARY_REQUEST, resumed_instruction
from envfarm.agent.loop import Agent, AgentLimits, AgentRun
from envfarm.agent.tools import ToolContext, tool_schemas
from envfarm.models.samples import merged_samples
from envfarm.models.token_layout import full_prompts
from envfarm.models.trajectory import Provenance, Trajectory
from envfarm.policy import CaptureOptions, OpenAIPolicy, PolicyServer, SamplingParams
from envfarm.testing.fake_sandbox import FakeSandbox
from envfarm.testing.fake_tokens import render_prompt, tokenize
from envfarm.testing.fake_vllm import FakeVLLM

INSTRUCTION = "Run every step, one command per turn, then submit."
STEPS = 299  # 299 bash turns, then submit: 300 action turns
BUDGET = 4000
SLACK = 200
"""How far an action prompt may pass the budget: the tool results appended since the server's
last count are estimated at 3 characters a token, and the fake tokenizer spends one a byte."""


async def long_session(fake: FakeVLLM, budget: int | None) -> tuple[AgentRun, FakeSandbox]:
    sandbox = FakeSandbox()
    await sandbox.start()
    async with (
        PolicyServer(fake) as server,
        OpenAIPolicy(server.base_url, "m", capture=CaptureOptions(profile="vllm")) as client,
    ):
        agent = Agent(
            client,
            sandbox,
            limits=AgentLimits(max_turns=400, context_budget=budget),
            tools=ToolContext(workdir="/app"),
            sampling=SamplingParams(temperature=1.0),
        )
        run = await agent.run(INSTRUCTION)
    return run, sandbox


def trajectory_of(run: AgentRun) -> Trajectory:
    return Trajectory(
        trajectory_id="t",
        episode_id="e",
        job_id="j",
        group_id="g",
        task_id="long",
        messages=run.messages,
        turns=run.turns,
        segments=run.segments,
        outcome=run.outcome,
        provenance=Provenance(task_hash="h", envfarm_version="0"),
    )


def body(fake: FakeVLLM, index: int) -> dict[str, Any]:
    sent = fake.replies[index].body
    assert isinstance(sent, dict)
    return sent


async def test_a_300_turn_session_summarizes_and_records_its_segments() -> None:
    commands = [f"echo step {i}" for i in range(STEPS)]
    fake = FakeVLLM(commands=commands)
    run, sandbox = await long_session(fake, BUDGET)

    assert run.outcome.stop_reason == "submitted"
    actions = [t for t in run.turns if t.kind == "action"]
    summaries = [t for t in run.turns if t.kind == "summary"]
    assert len(actions) == STEPS + 1
    assert len(summaries) == len(run.segments) >= 10
    assert run.outcome.turns == len(run.turns) == len(fake.requests)
    # The summaries carried the progress: every step ran once, in order, across segments.
    assert sandbox.commands == commands

    # Token data equals what the server sent, turn by turn (kept compact, expanded here).
    prompts = list(full_prompts(run.turns))
    for turn, prompt in zip(run.turns, prompts, strict=True):
        sent = body(fake, turn.index)
        choice = sent["choices"][0]
        assert prompt == sent["prompt_token_ids"]
        assert turn.completion_token_ids == choice["token_ids"]
        assert turn.logprobs == [c["logprob"] for c in choice["logprobs"]["content"]]
        assert turn.faults == []
        assert turn.attempts == 1
        assert turn.paused_s == 0.0

    # Each segment: restarted by its summary turn, its turns numbered after it.
    for segment in run.segments:
        summary_turn = run.turns[segment.summary_turn or 0]
        assert summary_turn.kind == "summary"
        assert segment.first_turn == summary_turn.index + 1
        assert summary_turn.segment == segment.index - 1
        assert {t.segment for t in run.turns[segment.first_turn :]} >= {segment.index}
        assert segment.context_budget == BUDGET
        assert segment.context_tokens is not None
        assert segment.context_tokens > BUDGET
        # The summary request: the whole context, then the request; tools kept, none allowed.
        request = fake.requests[summary_turn.index]
        assert request["messages"][-1] == {"role": "user", "content": SUMMARY_REQUEST}
        assert request["tool_choice"] == "none"
        assert request["tools"] == fake.requests[summary_turn.index - 1]["tools"]
        assert summary_turn.sampling["tool_choice"] == "none"
        assert summary_turn.tool_results == []
        said = body(fake, summary_turn.index)["choices"][0]["message"]["content"]
        assert segment.summary == said
        assert bytes(summary_turn.completion_token_ids or []).decode().startswith(said)
        # The summary request extends the segment's context, so the summary trains in it.
        before = prompts[summary_turn.index - 1] or []
        previous = run.turns[summary_turn.index - 1]
        context = before + (previous.completion_token_ids or [])
        assert (prompts[summary_turn.index] or [])[: len(context)] == context
        assert segment.prior_messages == request["messages"] + [
            {"role": "assistant", "content": said}
        ]
        # The next prompt: the system prompt, the instruction and the summary, nothing else.
        resumed = fake.requests[segment.first_turn]["messages"]
        assert resumed[0] == request["messages"][0]
        assert resumed[1:] == [{"role": "user", "content": resumed_instruction(INSTRUCTION, said)}]
        first = prompts[segment.first_turn]
        assert first == tokenize(render_prompt(resumed, tool_schemas()))
        assert said in bytes(first or []).decode()
        assert run.turns[segment.first_turn].prompt_token_ids == first  # stored whole once

    # The budget held: no action prompt grew past it (but for the estimate's slack).
    assert max(len(prompts[t.index] or []) for t in actions) <= BUDGET + SLACK
    # Storage: only each segment's first prompt is kept whole; the others are suffixes.
    whole = [t.index for t in run.turns if t.prompt_token_ids is not None]
    assert whole == [0] + [s.first_turn for s in run.segments]
    stored = sum(
        len(t.prompt_token_ids or t.prompt_suffix_ids or []) + len(t.completion_token_ids or [])
        for t in run.turns
    )
    assert stored <= (len(run.segments) + 1) * (BUDGET + SLACK) * 2

    # Training data: one merged sample per segment, summary tokens trained in their segment
    # and seen (untrained) as the prompt of the next.
    trajectory = trajectory_of(run)
    samples = merged_samples(trajectory)
    assert [s.segment for s in samples] == list(range(len(run.segments) + 1))
    for sample, segment in zip(samples, run.segments, strict=False):
        summary_turn = run.turns[segment.summary_turn or 0]
        assert sample.turns[-1] == summary_turn.index
        ids = summary_turn.completion_token_ids or []
        assert sample.token_ids[-len(ids) :] == ids
        assert sample.loss_mask[-len(ids) :] == [1] * len(ids)
        assert sample.logprobs[-len(ids) :] == summary_turn.logprobs
    for sample, segment in zip(samples[1:], run.segments, strict=True):
        assert sample.turns[0] == segment.first_turn
        first = prompts[segment.first_turn] or []
        assert sample.token_ids[: len(first)] == first
        assert set(sample.loss_mask[: len(first)]) == {0}

    # The trajectory's JSON keeps segments and turn kinds, and loads back.
    data = json.loads(trajectory.to_json(compact_tokens=True))
    assert [s["summary"] for s in data["segments"]] == [s.summary for s in run.segments]
    assert sum(1 for t in data["turns"] if t["kind"] == "summary") == len(run.segments)
    assert Trajectory.model_validate(data).segments == run.segments


async def test_without_a_budget_the_context_is_never_cut() -> None:
    fake = FakeVLLM(commands=[f"echo {i}" for i in range(30)])
    run, _ = await long_session(fake, None)
    assert run.outcome.stop_reason == "submitted"
    assert run.segments == []
    assert {t.kind for t in run.turns} == {"action"}
    assert all("tool_choice" not in r for r in fake.requests)


async def test_a_summary_too_long_for_the_budget_costs_turns_not_a_summary_loop() -> None:
    """A budget smaller than the restarted context: each segment still makes one step."""
    fake = FakeVLLM(commands=[f"echo {i}" for i in range(4)])
    run, sandbox = await long_session(fake, 10)
    assert run.outcome.stop_reason == "submitted"
    assert sandbox.commands == [f"echo {i}" for i in range(4)]
    kinds = [t.kind for t in run.turns]
    assert kinds == ["action", "summary"] * 4 + ["action"]
