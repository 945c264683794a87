"""OpenAIPolicy against real loopback servers running scripted responders."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest

from envfarm.errors import PolicyConfigError, PolicyError, PolicyResponseError, RequestRejected
from envfarm.policy import Completion, OpenAIPolicy, PolicyServer, Reply, SamplingParams
from envfarm.testing.scripted import ScriptedResponder, Step, completion, tool_call

MESSAGES = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the bug."},
]
BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}
SUBMIT = {"name": "submit", "description": "Finish.", "parameters": {"type": "object"}}
FAST: dict[str, Any] = {"backoff_base_s": 0.001, "backoff_max_s": 0.01}


@asynccontextmanager
async def scripted(
    steps: Sequence[Step], *, model_names: Sequence[str] = (), api_key: str | None = None
) -> AsyncIterator[tuple[ScriptedResponder, str]]:
    responder = ScriptedResponder(steps)
    async with PolicyServer(responder, model_names=model_names, api_key=api_key) as server:
        yield responder, server.base_url


async def complete_once(base_url: str, model: str = "m", **kwargs: Any) -> Completion:
    async with OpenAIPolicy(base_url, model, **{**FAST, **kwargs}) as client:
        return await client.complete(MESSAGES, [BASH, SUBMIT], SamplingParams())


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_tool_call_reply_is_parsed_and_request_is_openai_shaped() -> None:
    steps = [completion("Let me look.", tool_call("bash", {"command": "ls -la"}))]
    async with scripted(steps) as (responder, base_url):
        result = await complete_once(base_url + "/", model="policy-7b")

    assert result.content == "Let me look."
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("call_0_0", "bash", '{"command": "ls -la"}')
    ]
    assert result.finish_reason == "tool_calls"
    assert result.model == "policy-7b"
    assert result.endpoint == base_url
    assert result.attempts == 1
    assert result.message == {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {
                "id": "call_0_0",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "ls -la"}'},
            }
        ],
    }
    (request,) = responder.requests
    assert request["model"] == "policy-7b"
    assert request["messages"] == MESSAGES
    assert request["tools"] == [BASH, {"type": "function", "function": SUBMIT}]


async def test_content_only_reply_has_no_tool_calls_in_history_message() -> None:
    async with scripted(["All done."]) as (_, base_url):
        result = await complete_once(base_url)
    assert result.content == "All done."
    assert result.tool_calls == []
    assert result.finish_reason == "stop"
    assert result.message == {"role": "assistant", "content": "All done."}


async def test_invalid_json_arguments_are_kept_verbatim() -> None:
    async with scripted([tool_call("bash", '{"command": "ls')]) as (_, base_url):
        result = await complete_once(base_url)
    assert result.content is None
    assert result.tool_calls[0].arguments == '{"command": "ls'


async def test_sampling_params_are_sent_exactly() -> None:
    sampling = SamplingParams(temperature=0.0, top_p=0.95, max_tokens=256, seed=11)
    async with (
        scripted(["a", "b"]) as (responder, base_url),
        OpenAIPolicy(base_url, "m", **FAST) as client,
    ):
        first = await client.complete(MESSAGES, [], sampling)
        second = await client.complete(MESSAGES, [], SamplingParams(seed=3))
    sent = {k: v for k, v in responder.requests[0].items() if k not in ("model", "messages")}
    assert sent == {"temperature": 0.0, "top_p": 0.95, "max_tokens": 256, "seed": 11}
    assert first.sampling == sent
    # unset temperature and top_p are sent as their stated defaults, never left to the server
    assert set(responder.requests[1]) == {"model", "messages", "seed", "temperature", "top_p"}
    assert second.sampling == {"seed": 3, "temperature": 1.0, "top_p": 1.0}


async def test_503_is_retried_then_succeeds() -> None:
    steps: list[Step] = [Reply(status=503, body=b"overloaded"), tool_call("submit", {})]
    async with scripted(steps) as (responder, base_url):
        result = await complete_once(base_url)
    assert len(responder.requests) == 2
    assert result.attempts == 2
    assert result.tool_calls[0].name == "submit"
    assert "HTTP 503: overloaded" in result.retries[0].cause


async def test_429_retry_after_is_honoured_and_capped() -> None:
    steps: list[Step] = [
        Reply(status=429, body=b"slow down", headers={"Retry-After": "0"}),
        Reply(status=429, body=b"slow down", headers={"Retry-After": "3600"}),
        "ok",
    ]
    async with scripted(steps) as (responder, base_url):
        result = await complete_once(base_url, backoff_base_s=5.0, backoff_max_s=0.02)
    assert len(responder.requests) == 3
    assert [r.delay_s for r in result.retries] == [0.0, 0.02]
    assert result.content == "ok"


async def test_exhausted_retries_raise_infrastructure_policy_error() -> None:
    steps: list[Step] = [Reply(status=502, body=b"bad gateway #%d" % i) for i in range(3)]
    async with scripted(steps) as (responder, base_url):
        with pytest.raises(PolicyError) as caught:
            await complete_once(base_url, max_retries=2)
    assert type(caught.value) is PolicyError
    assert caught.value.infrastructure
    assert len(responder.requests) == 3
    assert "after 3 attempts" in str(caught.value)
    assert "bad gateway #2" in str(caught.value)


async def test_timeout_is_retried() -> None:
    release = asyncio.Event()
    script = ScriptedResponder(["second try"])
    calls = 0

    async def slow_first(request: dict[str, Any]) -> Reply:
        nonlocal calls
        calls += 1
        if calls == 1:
            await release.wait()
        return await script(request)

    async with PolicyServer(slow_first) as server:
        try:
            result = await complete_once(server.base_url, request_timeout_s=0.2)
        finally:
            release.set()
    assert result.content == "second try"
    assert result.attempts == 2
    assert "no complete answer within 0.2s" in result.retries[0].cause


@pytest.mark.parametrize(
    "body",
    [b"<html>Bad gateway</html>", b'{"id": "x", "choices": []}', b'{"choices": [{"index": 0}]}'],
)
async def test_unusable_200_is_a_response_error_saying_what_is_missing(body: bytes) -> None:
    async with scripted([Reply(status=200, body=body)]) as (responder, base_url):
        with pytest.raises(PolicyResponseError) as caught:
            await complete_once(base_url)
    assert len(responder.requests) == 1
    assert caught.value.status == 200
    message = str(caught.value)
    expected = {b"<": "not JSON", b'{"id"': "no choices[0]", b'{"cho': "choices[0].message"}
    assert next(v for k, v in expected.items() if body.startswith(k)) in message
    assert body.decode()[:10] in message


async def test_long_garbage_body_is_truncated_in_the_error() -> None:
    garbage = b"x" * 10_000
    async with scripted([Reply(status=200, body=garbage)]) as (_, base_url):
        with pytest.raises(PolicyResponseError) as caught:
            await complete_once(base_url)
    assert len(str(caught.value)) < 600
    assert "(10000 bytes)" in str(caught.value)


async def test_tool_calls_without_id_get_synthesised_ids_and_a_warning() -> None:
    body = {
        "model": "m",
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"function": {"name": "bash", "arguments": '{"command": "pwd"}'}},
                        {"id": "call_0", "function": {"name": "submit", "arguments": "{}"}},
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
    }
    async with scripted([Reply(body=body)]) as (_, base_url):
        result = await complete_once(base_url)
    ids = [c.id for c in result.tool_calls]
    assert ids[1] == "call_0"
    assert ids[0].startswith("call_0")
    assert len(set(ids)) == 2
    assert [c["id"] for c in result.message["tool_calls"]] == ids
    assert any("had no id" in w for w in result.warnings)


async def test_401_is_config_error_without_the_key() -> None:
    key = "sk-secret-abc123"
    echo = {"error": {"message": f"Incorrect API key provided: {key}", "code": "invalid_api_key"}}
    async with scripted([Reply(status=401, body=echo)]) as (responder, base_url):
        with pytest.raises(PolicyConfigError) as caught:
            await complete_once(base_url, api_key=key)
    assert len(responder.requests) == 1
    assert "401" in str(caught.value)
    assert key not in str(caught.value)
    assert key not in repr(caught.value)


async def test_api_key_is_sent_as_bearer_token() -> None:
    async with scripted(["hello"], api_key="right-key") as (_, base_url):
        result = await complete_once(base_url, api_key="right-key")
        with pytest.raises(PolicyConfigError) as caught:
            await complete_once(base_url, api_key="wrong-key")
    assert result.content == "hello"
    assert "wrong-key" not in str(caught.value)
    assert "check the API key" in str(caught.value)


async def test_404_route_names_the_url() -> None:
    async with scripted(["never"]) as (responder, base_url):
        wrong = base_url.removesuffix("/v1") + "/api"
        with pytest.raises(PolicyConfigError) as caught:
            await complete_once(wrong)
    assert responder.requests == []
    assert f"{wrong}/chat/completions" in str(caught.value)
    assert "OpenAI-compatible /v1 base URL" in str(caught.value)


async def test_unknown_model_names_the_model() -> None:
    async with scripted(["never"], model_names=["served-model"]) as (responder, base_url):
        with pytest.raises(PolicyConfigError) as caught:
            await complete_once(base_url, model="typo-model")
    assert responder.requests == []
    assert "'typo-model'" in str(caught.value)
    assert "does not serve model" in str(caught.value)


async def test_unknown_model_in_a_400_vllm_style_body_is_a_config_error() -> None:
    body = {"object": "error", "message": "The model `x` does not exist.", "code": 400}
    async with scripted([Reply(status=400, body=body)]) as (_, base_url):
        with pytest.raises(PolicyConfigError, match="does not serve model 'x'"):
            await complete_once(base_url, model="x")


async def test_other_4xx_is_sent_once_more_then_request_rejected() -> None:
    body = {"error": {"message": "'messages.3.tool_calls' is malformed."}}
    steps: list[Step] = [Reply(status=400, body=body)] * 2
    async with scripted(steps) as (responder, base_url):
        with pytest.raises(RequestRejected) as caught:
            await complete_once(base_url)
    assert len(responder.requests) == 2
    assert caught.value.status == 400
    assert not caught.value.retryable
    assert caught.value.infrastructure
    assert str(caught.value).startswith("request_rejected:")
    assert "is malformed" in str(caught.value)


async def test_a_single_4xx_then_success_is_a_completion() -> None:
    steps: list[Step] = [Reply(status=400, body=b"bad"), tool_call("submit", {})]
    async with scripted(steps) as (_responder, base_url):
        completion = await complete_once(base_url)
    assert completion.tool_calls[0].name == "submit"
    assert completion.attempts == 2


async def test_connection_refused_is_retried_then_policy_error() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    with pytest.raises(PolicyError) as caught:
        await complete_once(url, max_retries=2)
    assert type(caught.value) is PolicyError
    assert "after 3 attempts" in str(caught.value)
    assert isinstance(caught.value.__cause__, OSError)


@pytest.mark.parametrize(
    "url", ["ftp://127.0.0.1/v1", "http:///v1", "127.0.0.1:8000/v1", "http://h:port/v1", ""]
)
def test_invalid_base_url_is_config_error(url: str) -> None:
    with pytest.raises(PolicyConfigError, match="base URL"):
        OpenAIPolicy(url, "m")


def test_missing_model_is_config_error() -> None:
    with pytest.raises(PolicyConfigError, match="no model name"):
        OpenAIPolicy("http://127.0.0.1:1/v1", "")


async def test_one_session_is_reused_and_closed() -> None:
    async with scripted(["a", "b"]) as (_, base_url):
        client = OpenAIPolicy(base_url, "m", **FAST)
        await client.complete(MESSAGES, [], SamplingParams())
        session = client._session
        await client.complete(MESSAGES, [], SamplingParams())
        assert client._session is session
        await client.aclose()
    assert session is not None
    assert session.closed


async def test_extra_body_is_merged_and_raw_response_kept() -> None:
    step = completion("hi", response_extra={"prompt_token_ids": [1, 2, 3]})
    async with scripted([step]) as (responder, base_url):
        result = await complete_once(base_url, extra_body={"return_token_ids": True})
    assert responder.requests[0]["return_token_ids"] is True
    assert result.raw["prompt_token_ids"] == [1, 2, 3]
    assert json.loads(json.dumps(result.raw))["choices"][0]["message"]["content"] == "hi"
