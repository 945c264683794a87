"""The fake vLLM/SGLang server over loopback HTTP, read through OpenAIPolicy's token capture."""

from __future__ import annotations

import base64
import json
import struct
from array import array
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from envfarm.agent.tools import tool_schemas
from envfarm.errors import PolicyResponseError
from envfarm.policy import (
    CaptureOptions,
    Completion,
    OpenAIPolicy,
    PolicyServer,
    Reply,
    SamplingParams,
    builtin_responder,
    error_reply,
)
from envfarm.testing.fake_tokens import render_prompt, tokenize
from envfarm.testing.fake_vllm import FakeVLLM, Fault

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "responses"
START = [{"role": "system", "content": "Be useful."}, {"role": "user", "content": "Fix it."}]
FAST: dict[str, Any] = {"backoff_base_s": 0.001, "backoff_max_s": 0.01, "max_retries": 3}


@asynccontextmanager
async def serve(fake: Any, profile: Any = "auto", **options: Any) -> AsyncIterator[OpenAIPolicy]:
    capture = CaptureOptions(profile=profile, **options)
    async with (
        PolicyServer(fake) as server,
        OpenAIPolicy(server.base_url, "m", capture=capture, **FAST) as client,
    ):
        yield client


async def session(client: OpenAIPolicy, turns: int) -> list[Completion]:
    """Drive ``turns`` model calls the way the agent loop does (tool results appended)."""
    messages, done = [*START], []
    for _ in range(turns):
        result = await client.complete(messages, tool_schemas(), SamplingParams(temperature=1.0))
        done.append(result)
        messages.append(result.message)
        for call in result.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "ok\n"})
    return done


def keys(node: dict[str, Any]) -> set[str]:
    return set(node)


def int32(data: str) -> list[int]:
    return list(array("i", base64.b64decode(data)))


def npy_payload(text: str) -> bytes:
    raw = base64.b64decode(text)
    return raw[10 + struct.unpack("<H", raw[8:10])[0] :]


@pytest.mark.parametrize(
    ("name", "dialect", "routed", "sglang_token_ids"),
    [
        ("vllm_chat_token_ids_routed_lists", "vllm", True, True),
        ("sglang_chat_meta_info", "sglang", True, False),
        ("sglang_chat_token_ids_weight_versions", "sglang", False, True),
    ],
)
async def test_fake_answers_in_the_recorded_real_shapes(
    name: str, dialect: Any, routed: bool, sglang_token_ids: bool
) -> None:
    real = json.loads((FIXTURES / f"{name}.json").read_text())
    fake = FakeVLLM(
        dialect=dialect,
        commands=["ls"],
        routed_experts=routed,
        routed_format="lists",
        sglang_token_ids=sglang_token_ids,
        faults={0: Fault(kind="swap", version="8", at=3)} if "weight_versions" in name else None,
    )
    async with serve(fake, dialect, routed_experts=routed) as client:
        await session(client, 1)
    sent = fake.replies[0].body
    assert isinstance(sent, dict)
    assert keys(sent) == keys(real)
    assert keys(sent["usage"]) == keys(real["usage"])
    choice, real_choice = sent["choices"][0], real["choices"][0]
    assert keys(choice) == keys(real_choice)
    assert keys(choice["logprobs"]["content"][0]) == keys(real_choice["logprobs"]["content"][0])
    call, real_call = choice["message"]["tool_calls"][0], real_choice["message"]["tool_calls"][0]
    assert keys(call) == keys(real_call)
    if dialect == "sglang":
        assert keys(choice["meta_info"]) == keys(real_choice["meta_info"])
        assert keys(choice["message"]) == keys(real_choice["message"])
        assert type(choice["meta_info"]["output_token_logprobs"][0]) is list


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
@pytest.mark.parametrize("profile", ["auto", "explicit"])
async def test_token_data_equals_what_the_server_sent_turn_by_turn(
    dialect: Any, profile: str
) -> None:
    fake = FakeVLLM(dialect=dialect, commands=["ls", "cat x"], version="5")
    async with serve(fake, dialect if profile == "explicit" else "auto") as client:
        results = await session(client, 3)
        assert client.tokens.profile == dialect
    for result, reply, request in zip(results, fake.replies, fake.requests, strict=True):
        body = reply.body
        assert isinstance(body, dict)
        choice = body["choices"][0]
        tokens = result.tokens
        assert tokens is not None
        assert tokens.faults == []
        assert tokens.token_source == dialect
        prompt = body.get("prompt_token_ids") or choice.get("prompt_token_ids")
        assert tokens.prompt_token_ids == prompt
        assert tokens.prompt_token_ids == tokenize(
            render_prompt(request["messages"], request["tools"])
        )
        assert tokens.completion_token_ids == choice["token_ids"]
        assert tokens.logprobs == [c["logprob"] for c in choice["logprobs"]["content"]]
        assert (tokens.policy_version, tokens.policy_version_source) == (
            "5",
            "response" if dialect == "sglang" else "header",
        )
    first, second = results[0].tokens, results[1].tokens
    assert first is not None
    assert second is not None
    context = (first.prompt_token_ids or []) + (first.completion_token_ids or [])
    assert (second.prompt_token_ids or [])[: len(context)] == context
    assert [c.name for r in results for c in r.tool_calls] == ["bash", "bash", "submit"]


@pytest.mark.parametrize("profile", ["auto", "vllm", "sglang"])
async def test_requests_carry_the_profile_fields_and_auto_settles(profile: str) -> None:
    fake = FakeVLLM(dialect="sglang", commands=["ls"])
    async with serve(fake, profile, routed_experts=True) as client:
        await session(client, 2)
    # an explicit vllm profile finds no vLLM fields in SGLang's answers: each is asked again
    assert len(fake.requests) == (4 if profile == "vllm" else 2)
    first, second = fake.requests[0], fake.requests[-1]
    assert first["return_token_ids"] is True
    assert first["logprobs"] is True
    if profile == "vllm":
        assert "return_meta_info" not in first
        assert first["top_logprobs"] == 0
    else:
        assert first["return_meta_info"] is True
        assert first["return_routed_experts"] is True
    if profile == "auto":
        assert "top_logprobs" in first
        assert "top_logprobs" not in second
    assert second["temperature"] == 1.0


async def test_openai_profile_sends_nothing_extra_and_says_text_only() -> None:
    fake = FakeVLLM(commands=["ls"])
    async with serve(fake, "openai") as client:
        (result,) = await session(client, 1)
    assert not {"logprobs", "return_token_ids", "return_meta_info"} & set(fake.requests[0])
    assert result.tokens is not None
    assert result.tokens.token_source == "none"
    assert result.tokens.completion_token_ids is None
    assert result.tokens.policy_version == "0"  # the header still stamps the version


async def test_auto_against_a_strict_server_falls_back_to_text_only() -> None:
    """A server that rejects unknown fields (as OpenAI's own API does) still serves auto."""
    nop = builtin_responder("nop")
    seen: list[dict[str, Any]] = []

    async def strict(request: dict[str, Any]) -> Reply:
        seen.append(request)
        extra = sorted(set(request) - {"model", "messages", "tools", "temperature", "top_p"})
        if extra:
            return error_reply(400, f"Unrecognized request argument supplied: {extra[0]}")
        return await nop(request)

    async with serve(strict, "auto") as client:
        first, second = await session(client, 2)
        assert client.tokens.profile == "openai"
    expected = ["messages", "model", "temperature", "tools", "top_p"]
    assert [sorted(r) for r in seen[1:]] == [expected] * 2
    assert len(seen) == 3
    assert first.tokens is not None
    assert first.tokens.token_source == "none"
    assert second.tool_calls[0].name == "submit"


async def test_routed_experts_survive_byte_for_byte() -> None:
    cases: list[tuple[Any, Any]] = [("vllm", "lists"), ("vllm", "npy"), ("sglang", "npy")]
    for dialect, fmt in cases:
        fake = FakeVLLM(dialect=dialect, routed_experts=True, routed_format=fmt, moe_layers=3)
        async with serve(fake, "auto", routed_experts=True) as client:
            (result,) = await session(client, 1)
        body = fake.replies[0].body
        assert isinstance(body, dict)
        assert result.tokens is not None
        assert result.tokens.routed_experts is not None
        routed = result.tokens.routed_experts
        tokens = len(result.tokens.prompt_token_ids or []) + len(
            result.tokens.completion_token_ids or []
        )
        if dialect == "sglang":
            assert routed.data == body["choices"][0]["meta_info"]["routed_experts"]
            assert routed.shape == [(tokens - 1) * 3 * 2]
        else:
            assert routed.shape == [tokens - 1, 3, 2]
            sent = body["choices"][0]["routed_experts"]
            if fmt == "lists":
                assert int32(routed.data) == [v for p in sent for r in p for v in r]
            else:
                assert base64.b64decode(routed.data) == npy_payload(sent)


async def test_injected_faults() -> None:
    fake = FakeVLLM(
        dialect="sglang",
        commands=["a", "b", "c", "d"],
        faults={
            0: Fault(kind="unavailable", retry_after_s=0),
            1: "rate_limited",
            3: "abort",
            4: "mismatch",
            5: Fault(kind="swap", version="6", at=4),
            6: Fault(kind="slow", delay_s=0.05),
            7: "garbage",
        },
        version="5",
    )
    async with serve(fake, "sglang") as client:
        messages = [*START]
        first = await client.complete(messages, tool_schemas(), SamplingParams())
        aborted = await client.complete(messages, tool_schemas(), SamplingParams())
        mismatched = await client.complete(messages, tool_schemas(), SamplingParams())
        swapped = await client.complete(messages, tool_schemas(), SamplingParams())
        slow = await client.complete(messages, tool_schemas(), SamplingParams())
        with pytest.raises(PolicyResponseError, match="not JSON"):
            await client.complete(messages, tool_schemas(), SamplingParams())
    assert [r.cause.split(":")[0] for r in first.retries] == ["HTTP 503", "HTTP 429"]
    assert first.tokens is not None
    assert first.tokens.faults == []
    assert aborted.finish_reason == "abort"
    assert aborted.tool_calls == []
    assert aborted.tokens is not None
    assert first.tokens.completion_token_ids is not None
    assert (
        aborted.tokens.completion_token_ids
        == first.tokens.completion_token_ids[: len(first.tokens.completion_token_ids) // 2]
    )
    assert mismatched.tokens is not None
    assert any("logprobs" in f for f in mismatched.tokens.faults)
    assert swapped.tokens is not None
    spans = [(s.version, s.start, s.end) for s in swapped.tokens.policy_version_spans or []]
    ids = swapped.tokens.completion_token_ids or []
    assert spans == [("5", 0, 4), ("6", 4, len(ids))]
    assert swapped.tokens.policy_version == "6"
    assert slow.tokens is not None
    assert slow.tokens.policy_version == "6"
