"""The llama.cpp profile and token-in/token-out mode, against the fake engine over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from envfarm.agent.loop import Agent, AgentLimits, AgentRun
from envfarm.agent.tools import ToolContext, tool_schemas
from envfarm.errors import PolicyConfigError
from envfarm.models.samples import merged_samples
from envfarm.models.token_layout import full_prompts
from envfarm.models.trajectory import Provenance, Trajectory
from envfarm.policy import CaptureOptions, EndpointSpec, OpenAIPolicy, PolicyServer, PoolSettings
from envfarm.policy.base import PolicyClient, SamplingParams
from envfarm.policy.pool import EndpointPool
from envfarm.policy.profiles import ServerProfile
from envfarm.policy.server_api import Renderer
from envfarm.testing import fake_chatml as chatml
from envfarm.testing.fake_engine import EngineDialect, FakeEngine
from envfarm.testing.fake_sandbox import FakeSandbox
from envfarm.testing.scripted import ScriptedResponder, Step, completion, tool_call

FAST = PoolSettings(max_retries=3, backoff_base_s=0.0, backoff_max_s=0.0, cooldown_s=0.01)
STEPS: list[Step] = [
    tool_call("bash", {"command": "ls -la"}),
    completion("Now the file.", tool_call("write_file", {"path": "a.py", "content": "x = 1\n"})),
    tool_call("submit", {}),
]


class ChatMLRenderer(Renderer):
    """The fake model's template, rendered locally (as a named tokenizer would)."""

    name = "chatml"

    async def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, generation: bool
    ) -> list[int]:
        return chatml.tokenize(chatml.render(messages, tools, generation=generation))

    async def tokenize(self, text: str) -> list[int]:
        return chatml.tokenize(text)


@asynccontextmanager
async def pool_on(
    engine: FakeEngine | PolicyServer,
    *,
    profile: ServerProfile = "auto",
    token_mode: bool = False,
    renderer: Renderer | None = None,
) -> AsyncIterator[EndpointPool]:
    pool = EndpointPool(
        [EndpointSpec(url=engine.base_url)],
        "fake",
        settings=FAST,
        capture=CaptureOptions(profile=profile),
        token_mode=token_mode,
        renderer=renderer,
    )
    try:
        yield pool
    finally:
        await pool.aclose()


async def run_agent(client: PolicyClient, max_tokens: int | None = None) -> AgentRun:
    sandbox = FakeSandbox()
    await sandbox.start()
    agent = Agent(
        client,
        sandbox,
        limits=AgentLimits(max_turns=6),
        tools=ToolContext(workdir="/app"),
        sampling=SamplingParams(max_tokens=max_tokens),
    )
    return await agent.run("Do the task.")


def trajectory(run: AgentRun) -> Trajectory:
    return Trajectory(
        trajectory_id="t",
        episode_id="e",
        job_id="j",
        group_id="g",
        task_id="task",
        turns=run.turns,
        provenance=Provenance(task_hash="h", envfarm_version="0"),
    )


async def test_auto_probes_llamacpp_and_reads_its_exact_tokens() -> None:
    async with FakeEngine(STEPS) as engine, pool_on(engine) as pool:
        run = await run_agent(pool.session("e"))
    assert run.outcome.stop_reason == "submitted"
    chats = [body for path, body in engine.requests if path == "/v1/chat/completions"]
    assert all(b["logprobs"] is True and b["top_logprobs"] == 1 for b in chats)
    assert all(b["temperature"] == 1.0 and b["top_p"] == 1.0 for b in chats)
    assert len(run.turns) == len(engine.prompts)
    for turn in run.turns:
        assert turn.server_profile == "llamacpp"
        assert turn.server_profile_reason is not None
        assert "/props" in turn.server_profile_reason
        assert turn.token_source == "llamacpp"
        assert turn.request_mode == "chat"
        assert turn.faults == []
        ids, logprobs = turn.completion_token_ids, turn.logprobs
        assert ids is not None
        assert logprobs is not None
        assert len(ids) == len(logprobs)
        assert ids[-1] == chatml.IM_END
        assert turn.completion_tokens == [
            chatml.piece(t) if t != chatml.IM_END else "" for t in ids
        ]
        assert turn.server_timings is not None
        assert turn.server_timings["predicted_n"] == len(ids)
        assert turn.sampling == {"temperature": 1.0, "top_p": 1.0}
    assert_the_servers_own(engine, run)


async def test_top_logprobs_zero_gets_no_logprobs_from_llamacpp_and_says_so() -> None:
    """A user's ``top_logprobs: 0`` wins over the profile's, on the re-ask too: the turn is kept
    without token data, and says why."""
    async with FakeEngine(STEPS) as engine:
        capture = CaptureOptions(profile="llamacpp")
        client = OpenAIPolicy(
            engine.base_url, "fake", extra_body={"top_logprobs": 0}, capture=capture
        )
        async with client:
            done = await client.complete([{"role": "user", "content": "hi"}], [], SamplingParams())
    chats = [body for path, body in engine.requests if path == "/v1/chat/completions"]
    assert [body["top_logprobs"] for body in chats] == [0, 0]
    assert "logprobs" not in done.raw["choices"][0]
    tokens = done.tokens
    assert tokens is not None
    assert tokens.faults == []
    assert tokens.completion_token_ids is None
    assert tokens.token_source == "none"
    assert "top_logprobs of at least 1" in (tokens.token_source_reason or "")
    assert "top_logprobs of at least 1" in (tokens.token_reask or "")
    assert done.attempts == 2


def assert_the_servers_own(engine: FakeEngine, run: AgentRun) -> None:
    """Each turn's prompt ids are exactly those the engine ran, its completion ids and logprobs
    exactly those it sampled."""
    assert list(full_prompts(run.turns)) == engine.prompts
    assert [t.completion_token_ids for t in run.turns] == engine.sampled
    for turn, prompt in zip(run.turns, engine.prompts, strict=True):
        ids = turn.completion_token_ids or []
        assert turn.logprobs == [chatml.logprob(t, len(prompt) + i) for i, t in enumerate(ids)]


def assert_extends_by_construction(engine: FakeEngine, run: AgentRun) -> None:
    turns = run.turns
    for k in range(1, len(turns)):
        previous = engine.prompts[k - 1] + (turns[k - 1].completion_token_ids or [])
        assert engine.prompts[k][: len(previous)] == previous
    samples = merged_samples(trajectory(run))
    assert len(samples) == 1
    sample = samples[0]
    last = len(turns) - 1
    assert sample.token_ids == engine.prompts[last] + (turns[last].completion_token_ids or [])
    sampled = [t for t, m in zip(sample.token_ids, sample.loss_mask, strict=True) if m]
    assert sampled == [t for turn in turns for t in turn.completion_token_ids or []]


@pytest.mark.parametrize("dialect", ["llamacpp", "vllm", "sglang"])
async def test_token_mode_prompts_extend_and_merge_into_one_sample(dialect: EngineDialect) -> None:
    renderer = ChatMLRenderer() if dialect == "sglang" else None
    async with (
        FakeEngine(STEPS, dialect=dialect) as engine,
        pool_on(engine, token_mode=True, renderer=renderer) as pool,
    ):
        await pool.preflight(token_mode=True)
        run = await run_agent(pool.session("e"))
    assert run.outcome.stop_reason == "submitted"
    assert [t.tool_results[0].name for t in run.turns] == ["bash", "write_file", "submit"]
    assert run.turns[1].tool_results[0].arguments == '{"path": "a.py", "content": "x = 1\\n"}'
    for turn in run.turns:
        assert turn.request_mode == "tokens"
        assert turn.token_source == dialect
        assert turn.faults == []
        assert turn.completion_text is not None
        assert "<tool_call>" in turn.completion_text
    assert_extends_by_construction(engine, run)
    assert_the_servers_own(engine, run)
    # the first prompt is the template's own rendering of the history
    first = chatml.render(run.messages[:2], tool_schemas())
    assert engine.prompts[0] == chatml.tokenize(first)
    if dialect == "sglang":
        assert {t.policy_version for t in run.turns} == {"v1"}


async def test_chat_mode_rerendering_breaks_extension_where_token_mode_does_not() -> None:
    """Why token mode: the template re-renders the pretty-printed tool call compactly."""
    async with FakeEngine(STEPS) as engine, pool_on(engine) as pool:
        run = await run_agent(pool.session("e"))
    first = engine.prompts[0] + (run.turns[0].completion_token_ids or [])
    assert engine.prompts[1][: len(first)] != first
    assert len(merged_samples(trajectory(run))) == 3


async def test_token_mode_asked_of_a_text_only_server_fails_before_any_request() -> None:
    responder = ScriptedResponder([tool_call("submit", {})])
    async with PolicyServer(responder) as server, pool_on(server, token_mode=True) as pool:
        with pytest.raises(PolicyConfigError, match="cannot take a prompt of token ids"):
            await pool.preflight(token_mode=True)
    assert responder.requests == []


async def test_token_mode_on_sglang_needs_a_tokenizer() -> None:
    async with (
        FakeEngine(STEPS, dialect="sglang") as engine,
        pool_on(engine, token_mode=True) as pool,
    ):
        with pytest.raises(PolicyConfigError, match="--tokenizer"):
            await pool.preflight(token_mode=True)
    assert engine.prompts == []
