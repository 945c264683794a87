"""A token-mode turn rides out a server restart, as a chat-mode turn does.

A token-mode turn renders its new messages through the server's own API (vLLM's ``/tokenize``,
llama.cpp's ``/apply-template`` + ``/tokenize``) before it generates. Against a real vLLM killed
and restarted mid-job, those renders failed at the first refused connection and raised straight
out of the episode, while a completion would have waited for the endpoint to come back; each
episode in flight then burned its retries within seconds and was lost (bench/RESULTS.md). The
renders now go through the pool's retries and outage handling (``EndpointPool.side_request``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from envfarm.agent.tools import tool_schemas
from envfarm.errors import PolicyError
from envfarm.policy import CaptureOptions, EndpointSpec, PoolSettings
from envfarm.policy.base import Completion, PolicyClient, SamplingParams
from envfarm.policy.pool import EndpointPool
from envfarm.policy.server import Reply, error_reply
from envfarm.testing.fake_engine import EngineDialect, FakeEngine
from envfarm.testing.scripted import Step, tool_call

SETTINGS = PoolSettings(
    max_retries=3,
    backoff_base_s=0.0,
    backoff_max_s=0.0,
    cooldown_s=0.01,
    pause_backoff_base_s=0.001,
    pause_backoff_max_s=0.005,
)
STEPS: list[Step] = [tool_call("bash", {"command": "ls"}), tool_call("submit", {})]
DIALECTS: list[EngineDialect] = ["vllm", "llamacpp"]


@asynccontextmanager
async def token_pool(
    engine: FakeEngine, settings: PoolSettings = SETTINGS
) -> AsyncIterator[EndpointPool]:
    pool = EndpointPool(
        [EndpointSpec(url=engine.base_url)],
        "fake",
        settings=settings,
        capture=CaptureOptions(profile="auto"),
        token_mode=True,
    )
    async with pool:
        await pool.preflight(token_mode=True)
        yield pool


async def first_turn(session: PolicyClient) -> tuple[list[dict[str, Any]], Completion]:
    """The first turn of a session, and the history its second turn sends."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "List the files."}]
    done = await session.complete(history, tool_schemas(), SamplingParams())
    assert done.message is not None
    assert done.tool_calls
    answer = {"role": "tool", "tool_call_id": done.tool_calls[0].id, "content": "a.py\n"}
    return [*history, done.message, answer], done


async def until(condition: Callable[[], bool]) -> None:
    """Yields to the loop until ``condition`` holds (or the step budget runs out)."""
    for _ in range(20_000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the condition never held")


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_token_mode_turn_waits_for_a_restarted_server(dialect: EngineDialect) -> None:
    first = FakeEngine(STEPS, dialect=dialect)
    await first.__aenter__()
    port = first.port
    async with token_pool(first) as pool:
        session = pool.session("episode")
        history, done = await first_turn(session)
        await first.__aexit__(None, None, None)  # the server dies between two turns
        turn = asyncio.create_task(session.complete(history, tool_schemas(), SamplingParams()))
        await until(lambda: turn.done() or pool.status()[0].state != "closed")
        assert not turn.done(), turn.exception() if turn.done() else None
        async with FakeEngine(STEPS[1:], dialect=dialect, port=port) as second:
            again = await turn
    assert again.tokens is not None
    assert again.tokens.faults == []
    prompt = again.tokens.prompt_token_ids
    sent = done.tokens.prompt_token_ids if done.tokens else None
    sampled = done.tokens.completion_token_ids if done.tokens else None
    assert prompt is not None
    assert sent is not None
    assert sampled is not None
    assert prompt[: len(sent) + len(sampled)] == sent + sampled  # the context carried on
    assert second.prompts == [prompt]
    assert [t.name for t in again.tool_calls] == ["submit"]


async def test_a_side_request_answered_503_is_retried_without_tripping_the_breaker() -> None:
    """A 503 (a weight swap) is a pause, not a failure: four in a row would eject the endpoint
    if they counted against its breaker."""
    paused: list[Reply] = [error_reply(503, "weights are being swapped")]
    async with FakeEngine(STEPS, dialect="vllm") as engine, token_pool(engine) as pool:
        engine.path_faults["/tokenize"] = paused * 4
        _, done = await first_turn(pool.session("episode"))
        status = pool.status()[0]
    assert done.tokens is not None
    assert done.tokens.prompt_token_ids
    assert [path for path, _ in engine.requests].count("/tokenize") == 5
    assert (status.state, status.consecutive_failures) == ("closed", 0)


async def test_a_side_request_gives_up_when_the_server_stays_down() -> None:
    settings = SETTINGS.model_copy(update={"down_budget_s": 0.05})
    engine = FakeEngine(STEPS, dialect="vllm")
    await engine.__aenter__()
    async with token_pool(engine, settings) as pool:
        session = pool.session("episode")
        history, _ = await first_turn(session)
        await engine.__aexit__(None, None, None)  # and never comes back
        with pytest.raises(PolicyError, match="every policy endpoint is down") as caught:
            await session.complete(history, tool_schemas(), SamplingParams())
    assert caught.value.retryable
