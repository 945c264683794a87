"""The capture endpoint over real HTTP on loopback, forwarding to the fake vLLM server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from envfarm.agent.capture.server import CaptureServer
from envfarm.agent.capture.session import CaptureLimits, CaptureSession
from envfarm.policy import PolicyServer
from envfarm.policy.base import SamplingParams
from envfarm.policy.openai import OpenAIPolicy
from envfarm.policy.profiles import CaptureOptions
from envfarm.policy.server import error_reply
from envfarm.testing.fake_vllm import FakeVLLM
from envfarm.testing.scripted import ScriptedResponder

pytestmark = pytest.mark.asyncio(loop_scope="session")

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]
ASK: dict[str, Any] = {
    "model": "anything",
    "messages": [{"role": "user", "content": "fix it"}],
    "tools": TOOLS,
}


class Endpoint:
    def __init__(self, fake: FakeVLLM, session: CaptureSession, url: str) -> None:
        self.fake, self.session, self.url = fake, session, url

    async def post(self, path: str, body: Any) -> tuple[int, Any]:
        async with aiohttp.ClientSession() as http, http.post(self.url + path, json=body) as r:
            text = await r.text()
            if r.content_type == "text/event-stream":
                return r.status, text
            return r.status, json.loads(text)


async def _endpoint(limits: CaptureLimits, fake: FakeVLLM) -> AsyncIterator[Endpoint]:
    sampling = SamplingParams(temperature=0.5, max_tokens=64)
    async with (
        PolicyServer(fake) as server,
        OpenAIPolicy(server.base_url, "m", capture=CaptureOptions(profile="vllm")) as client,
    ):
        session = CaptureSession(client, sampling=sampling, limits=limits)
        async with CaptureServer(session, model="policy") as capture:
            yield Endpoint(fake, session, f"http://127.0.0.1:{capture.port}")


@pytest_asyncio.fixture(loop_scope="session")
async def endpoint() -> AsyncIterator[Endpoint]:
    fake = FakeVLLM(commands=["ls", "cat x"], version="3")
    async for made in _endpoint(CaptureLimits(max_turns=3), fake):
        yield made


async def test_a_chat_call_is_forwarded_and_recorded_token_exact(endpoint: Endpoint) -> None:
    status, body = await endpoint.post("/v1/chat/completions", ASK | {"temperature": 2.0})
    assert status == 200
    [call] = body["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"command": "ls"}
    assert "token_ids" not in body["choices"][0]  # token data stays with envfarm
    [turn] = endpoint.session.turns
    reply = endpoint.fake.replies[0].body
    assert isinstance(reply, dict)
    assert turn.completion_token_ids == reply["choices"][0]["token_ids"]
    assert turn.prompt_token_ids == reply["prompt_token_ids"]
    assert turn.policy_version == "3"
    sent = endpoint.fake.requests[0]
    assert (sent["temperature"], sent["max_tokens"]) == (0.5, 64)  # the job's, not the agent's
    assert endpoint.session.messages[-1]["tool_calls"][0]["id"] == call["id"]


async def test_a_streamed_call_carries_the_same_answer(endpoint: Endpoint) -> None:
    status, text = await endpoint.post("/v1/chat/completions", ASK | {"stream": True})
    assert status == 200
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    assert text.rstrip().endswith("data: [DONE]")
    calls = [c for e in events for c in e["choices"][0]["delta"].get("tool_calls", [])]
    assert [c["function"]["name"] for c in calls] == ["bash"]
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_malformed_requests_get_a_servers_error_and_a_recorded_turn() -> None:
    async for endpoint in _endpoint(CaptureLimits(), FakeVLLM(commands=["ls"])):
        status, body = await endpoint.post("/v1/chat/completions", {"model": "m"})
        assert status == 400
        assert body["error"]["type"] == "invalid_request_error"
        assert "messages" in body["error"]["message"]
        [turn] = endpoint.session.turns
        assert turn.faults
        assert "malformed request" in turn.faults[0]
        assert endpoint.fake.requests == []


async def test_the_turn_limit_answers_a_clear_error_and_ends_the_session() -> None:
    async for endpoint in _endpoint(CaptureLimits(max_turns=1), FakeVLLM(commands=["ls"])):
        assert (await endpoint.post("/v1/chat/completions", ASK))[0] == 200
        status, body = await endpoint.post("/v1/chat/completions", ASK)
        assert status == 400
        assert body["error"]["code"] == "envfarm_limit_reached"
        assert "turn limit (1)" in body["error"]["message"]
        assert endpoint.session.stopped.is_set()
        assert endpoint.session.stop_reason == "max_turns"
        assert len(endpoint.fake.requests) == 1


async def test_a_policy_failure_is_a_503_and_ends_the_session() -> None:
    responder = ScriptedResponder([error_reply(500, "boom")] * 3)
    sampling = SamplingParams()
    async with (
        PolicyServer(responder) as server,
        OpenAIPolicy(server.base_url, "m", max_retries=0) as client,
    ):
        session = CaptureSession(client, sampling=sampling, limits=CaptureLimits())
        async with CaptureServer(session, model="policy") as capture:
            endpoint = Endpoint(FakeVLLM(), session, f"http://127.0.0.1:{capture.port}")
            status, body = await endpoint.post("/v1/chat/completions", ASK)
    assert status == 503
    assert body["error"]["type"] == "server_error"
    assert session.policy_failure is not None
    assert session.stopped.is_set()


async def test_the_responses_api_is_translated_both_ways(endpoint: Endpoint) -> None:
    body = {
        "model": "gpt",
        "instructions": "be brief",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}
        ],
        "tools": [
            {"type": "function", "name": "bash", "parameters": TOOLS[0]["function"]["parameters"]}
        ],
    }
    status, answer = await endpoint.post("/v1/responses", body)
    assert status == 200
    assert answer["object"] == "response"
    calls = [item for item in answer["output"] if item["type"] == "function_call"]
    assert [c["name"] for c in calls] == ["bash"]
    forwarded = endpoint.fake.requests[-1]
    assert forwarded["messages"][0] == {"role": "system", "content": "be brief"}
    assert forwarded["tools"][0]["function"]["name"] == "bash"
    assert endpoint.session.requests[-1] == body  # the raw request as the agent sent it


async def test_anthropic_messages_are_translated_both_ways(endpoint: Endpoint) -> None:
    body = {
        "model": "claude",
        "max_tokens": 32,
        "system": "be brief",
        "messages": [{"role": "user", "content": "go"}],
        "tools": [{"name": "bash", "input_schema": TOOLS[0]["function"]["parameters"]}],
    }
    status, answer = await endpoint.post("/v1/messages", body)
    assert status == 200
    assert answer["type"] == "message"
    assert answer["stop_reason"] == "tool_use"
    [use] = [block for block in answer["content"] if block["type"] == "tool_use"]
    assert use["name"] == "bash"
    assert isinstance(use["input"], dict)
    assert (
        endpoint.fake.requests[-1]["max_tokens"] == 32
    )  # the smaller of the agent's and the job's


async def test_unknown_routes_get_openais_json_errors(endpoint: Endpoint) -> None:
    status, body = await endpoint.post("/v1/embeddings", {"input": "x"})
    assert status == 404
    assert body["error"]["message"] == "Invalid URL (POST /v1/embeddings)"
    status, body = await endpoint.post("/v1/models", {})
    assert status == 405
    assert body["error"]["type"] == "invalid_request_error"
    async with aiohttp.ClientSession() as http, http.get(endpoint.url + "/v1/models") as r:
        assert [model["id"] for model in (await r.json())["data"]] == ["policy"]
    assert endpoint.fake.requests == []
