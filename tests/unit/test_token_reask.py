"""A missing answer field is not a corrupt one: an answer without its token data is asked again
once; still without, the turn is kept with ``token_source: "none"``. Inconsistent data is not
asked again. Real HTTP on loopback against the fake servers."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from envfarm.agent.tools import tool_schemas
from envfarm.policy import (
    CaptureOptions,
    EndpointPool,
    EndpointSpec,
    OpenAIPolicy,
    PolicyServer,
    PoolSettings,
    Reply,
    SamplingParams,
)
from envfarm.policy.base import Completion, PolicyClient
from envfarm.policy.profiles import ServerProfile
from envfarm.testing.fake_engine import FakeEngine
from envfarm.testing.fake_vllm import FakeVLLM, FaultKind
from envfarm.testing.scripted import tool_call

START = [{"role": "system", "content": "Be useful."}, {"role": "user", "content": "Fix it."}]
FAST = PoolSettings(max_retries=3, backoff_base_s=0.0, backoff_max_s=0.0, cooldown_s=0.01)
REASK = "asked again with the"


@asynccontextmanager
async def pool_for(fake: FakeVLLM, profile: ServerProfile = "vllm") -> AsyncIterator[PolicyClient]:
    async with PolicyServer(fake) as server:
        capture = CaptureOptions(profile=profile)
        pool = EndpointPool(
            [EndpointSpec(url=server.base_url)], "m", settings=FAST, capture=capture
        )
        async with pool:
            yield pool.session("episode")


async def first_turn(client: PolicyClient) -> Completion:
    return await client.complete(START, tool_schemas(), SamplingParams())


def reasks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
async def test_an_answer_without_token_data_is_asked_again_and_the_second_kept(
    dialect: Any, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeVLLM(dialect=dialect, commands=["ls"], faults={0: "omit"})
    async with pool_for(fake, dialect) as client:
        done = await first_turn(client)
    assert len(fake.requests) == 2
    assert fake.requests[1] == fake.requests[0]  # the profile's fields, asked once more
    tokens = done.tokens
    assert tokens is not None
    assert tokens.token_source == dialect
    assert tokens.faults == []
    assert tokens.token_source_reason is None
    assert tokens.token_reask is not None
    assert "prompt_token_ids is missing" in tokens.token_reask
    second = fake.replies[1].body
    assert isinstance(second, dict)
    expected = second["prompt_token_ids"] if dialect == "vllm" else None
    expected = expected or second["choices"][0]["prompt_token_ids"]
    assert tokens.prompt_token_ids == expected
    assert tokens.completion_token_ids == second["choices"][0]["token_ids"]
    assert done.attempts == 2
    (warning,) = reasks(caplog)
    assert REASK in warning
    assert "the second answer has it" in warning


async def test_an_answer_still_without_token_data_is_kept_with_token_source_none(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeVLLM(commands=["ls"], faults={0: "omit", 1: "omit"})
    async with pool_for(fake) as client:
        done = await first_turn(client)
    assert len(fake.requests) == 2
    tokens = done.tokens
    assert tokens is not None
    assert tokens.faults == []
    assert tokens.token_source == "none"
    assert tokens.prompt_token_ids is tokens.completion_token_ids is tokens.logprobs is None
    assert "still lacked" in (tokens.token_source_reason or "")
    assert "prompt_token_ids is missing" in (tokens.token_reask or "")
    assert tokens.policy_version == "0"  # the version is not token data: it is kept
    assert done.tool_calls[0].name == "bash"
    assert done.attempts == 2
    (warning,) = reasks(caplog)
    assert "lacks it too" in warning


@pytest.mark.parametrize(("fault", "said"), [("unavailable", "HTTP 503"), ("garbage", "not JSON")])
async def test_a_reask_that_fails_keeps_the_first_answer_without_token_data(
    fault: FaultKind, said: str
) -> None:
    fake = FakeVLLM(commands=["ls"], faults={0: "omit", 1: fault})
    async with pool_for(fake) as client:
        done = await first_turn(client)
    assert len(fake.requests) == 2
    tokens = done.tokens
    assert tokens is not None
    assert tokens.token_source == "none"
    assert tokens.faults == []
    assert "asking again failed" in (tokens.token_source_reason or "")
    assert said in (tokens.token_source_reason or "")
    assert done.tool_calls[0].name == "bash"  # the first answer, kept


async def test_inconsistent_token_data_is_a_fault_and_not_asked_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeVLLM(commands=["ls"], faults={0: "mismatch"})
    async with pool_for(fake) as client:
        done = await first_turn(client)
    assert len(fake.requests) == 1
    assert done.tokens is not None
    assert done.tokens.token_reask is None
    assert any("logprobs" in fault for fault in done.tokens.faults)
    assert reasks(caplog) == []


async def test_after_a_probe_nothing_answered_llamacpp_is_asked_again_with_its_fields() -> None:
    """The fallback fields (the first answer decides) get no logprobs from llama.cpp; the first
    answer shows llama.cpp's ``timings``, so the request is asked again with its fields."""
    async with FakeEngine([tool_call("submit", {})] * 2) as engine:
        client = OpenAIPolicy(engine.base_url, "fake", capture=CaptureOptions(profile="auto"))
        client.tokens.probed = True  # as after a probe that nothing answered
        async with client:
            done = await first_turn(client)
    chats = [body for path, body in engine.requests if path == "/v1/chat/completions"]
    assert [body["top_logprobs"] for body in chats] == [0, 1]
    assert "return_token_ids" in chats[0]
    assert "return_token_ids" not in chats[1]
    tokens = done.tokens
    assert tokens is not None
    assert (tokens.server_profile, tokens.token_source) == ("llamacpp", "llamacpp")
    assert tokens.faults == []
    assert tokens.completion_token_ids == engine.sampled[-1]
    assert tokens.prompt_token_ids == engine.prompts[-1]
    assert "top_logprobs of at least 1" in (tokens.token_reask or "")


async def test_single_client_counts_the_reask_as_an_attempt() -> None:
    fake = FakeVLLM(commands=["ls"], faults={0: "omit"})
    async with (
        PolicyServer(fake) as server,
        OpenAIPolicy(server.base_url, "m", capture=CaptureOptions(profile="vllm")) as client,
    ):
        done = await first_turn(client)
    assert done.attempts == 2
    assert done.tokens is not None
    assert done.tokens.token_source == "vllm"


async def test_token_mode_asks_again_for_sampled_ids_the_answer_lacked() -> None:
    bare = Reply(
        body={
            "id": "cmpl-1",
            "object": "text_completion",
            "model": "fake",
            "choices": [{"index": 0, "text": "hi", "finish_reason": "stop"}],
        }
    )
    async with FakeEngine([tool_call("submit", {})], dialect="vllm", faults=[bare]) as engine:
        pool = EndpointPool(
            [EndpointSpec(url=engine.base_url)],
            "fake",
            settings=FAST,
            capture=CaptureOptions(profile="vllm"),
            token_mode=True,
        )
        async with pool:
            done = await first_turn(pool.session("episode"))
    generations = [body for path, body in engine.requests if path == "/v1/completions"]
    assert len(generations) == 2
    assert generations[0]["prompt"] == generations[1]["prompt"]
    tokens = done.tokens
    assert tokens is not None
    assert tokens.token_source == "vllm"
    assert tokens.request_mode == "tokens"
    assert tokens.completion_token_ids == engine.sampled[-1]
    assert "choices[0].token_ids is missing" in (tokens.token_reask or "")
    assert done.tool_calls[0].name == "submit"
