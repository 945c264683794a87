"""PolicyServer, the built-in policies and the scripted responder, over real loopback HTTP."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from envfarm.errors import PolicyConfigError, PolicyError, PolicyResponseError
from envfarm.policy import (
    BUILTIN_POLICIES,
    ORACLE_COMMAND,
    OpenAIPolicy,
    PolicyServer,
    Reply,
    SamplingParams,
    builtin_responder,
)
from envfarm.testing.scripted import ScriptedResponder

TOOLS = [
    {"name": "bash", "parameters": {"type": "object"}},
    {"name": "submit", "parameters": {"type": "object"}},
]
START = [{"role": "system", "content": "Solve it."}, {"role": "user", "content": "Task."}]
FAST: dict[str, Any] = {"max_retries": 1, "backoff_base_s": 0.001, "backoff_max_s": 0.01}


async def post(url: str, body: bytes | dict[str, Any]) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with aiohttp.ClientSession() as session, session.post(url, data=data) as response:
        return response.status, await response.json(content_type=None)


async def get(url: str, *, status: int = 200, headers: dict[str, str] | None = None) -> Any:
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as response:
        assert response.status == status
        return await response.json()


def tool_result(call_id: str, output: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": output}


async def test_oracle_runs_the_solution_then_submits() -> None:
    async with (
        PolicyServer(builtin_responder("oracle"), model_names=["oracle"]) as server,
        OpenAIPolicy(server.base_url, "oracle", **FAST) as client,
    ):
        first = await client.complete(START, TOOLS, SamplingParams())
        history = [*START, first.message, tool_result(first.tool_calls[0].id, "solved\n")]
        second = await client.complete(history, TOOLS, SamplingParams())

    assert [(c.name, json.loads(c.arguments)) for c in first.tool_calls] == [
        ("bash", {"command": ORACLE_COMMAND})
    ]
    assert [(c.name, json.loads(c.arguments)) for c in second.tool_calls] == [("submit", {})]
    assert first.tool_calls[0].id != second.tool_calls[0].id
    assert first.finish_reason == second.finish_reason == "tool_calls"
    assert first.model == "oracle"
    assert first.warnings == []


async def test_oracle_ignores_assistant_turns_that_did_not_call_bash() -> None:
    thinking = {"role": "assistant", "content": "Let me think."}
    async with (
        PolicyServer(builtin_responder("oracle")) as server,
        OpenAIPolicy(server.base_url, "any-name", **FAST) as client,
    ):
        result = await client.complete([*START, thinking], TOOLS, SamplingParams())
    assert result.tool_calls[0].name == "bash"
    assert result.model == "any-name"


async def test_nop_submits_at_every_step() -> None:
    async with (
        PolicyServer(builtin_responder("nop")) as server,
        OpenAIPolicy(server.base_url, "nop", **FAST) as client,
    ):
        first = await client.complete(START, TOOLS, SamplingParams())
        history = [*START, first.message, tool_result(first.tool_calls[0].id, "")]
        second = await client.complete(history, TOOLS, SamplingParams())
    for result in (first, second):
        assert [(c.name, c.arguments) for c in result.tool_calls] == [("submit", "{}")]


@pytest.mark.parametrize("name", sorted(BUILTIN_POLICIES))
async def test_builtin_response_has_the_openai_shape(name: str) -> None:
    async with PolicyServer(builtin_responder(name)) as server:
        status, body = await post(
            f"{server.base_url}/chat/completions", {"model": "echo-me", "messages": START}
        )
    assert status == 200
    assert body["object"] == "chat.completion"
    assert body["model"] == "echo-me"
    assert body["id"].startswith("chatcmpl-")
    assert isinstance(body["created"], int)
    assert set(body["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}
    (choice,) = body["choices"]
    assert choice["index"] == 0
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert choice["message"]["role"] == "assistant"
    assert call["type"] == "function"
    assert set(call["function"]) == {"name", "arguments"}


@pytest.mark.parametrize(
    ("request_body", "param"),
    [
        ({"model": "m"}, "messages"),
        ({"model": "m", "messages": "hello"}, "messages"),
        ({"model": "m", "messages": [{"content": "no role"}]}, "messages[0]"),
    ],
)
async def test_builtin_rejects_a_request_that_is_not_a_chat_completion(
    request_body: dict[str, Any], param: str
) -> None:
    async with PolicyServer(builtin_responder("oracle")) as server:
        status, body = await post(f"{server.base_url}/chat/completions", request_body)
    assert status == 400
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["param"] == param
    assert "messages" in body["error"]["message"]


def test_unknown_builtin_is_a_config_error_listing_the_known_ones() -> None:
    with pytest.raises(PolicyConfigError, match="nop, oracle"):
        builtin_responder("genius")


async def test_models_route_and_unknown_model_error_shape() -> None:
    async with PolicyServer(ScriptedResponder([]), model_names=["a", "b"]) as server:
        models = await get(f"{server.base_url}/models")
        status, body = await post(
            f"{server.base_url}/chat/completions", {"model": "zzz", "messages": START}
        )
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["a", "b"]
    assert all(m["object"] == "model" for m in models["data"])
    assert status == 404
    assert body == {
        "error": {
            "message": "The model `zzz` does not exist.",
            "type": "invalid_request_error",
            "param": None,
            "code": "model_not_found",
        }
    }


async def test_server_rejects_non_json_and_missing_model() -> None:
    responder = ScriptedResponder(["unused"])
    async with PolicyServer(responder) as server:
        url = f"{server.base_url}/chat/completions"
        bad_json = await post(url, b"{not json")
        no_model = await post(url, {"messages": START})
    assert bad_json[0] == 400
    assert "not valid JSON" in bad_json[1]["error"]["message"]
    assert no_model[0] == 400
    assert no_model[1]["error"]["param"] == "model"
    assert responder.requests == []


async def test_api_key_guards_every_route() -> None:
    async with PolicyServer(builtin_responder("nop"), api_key="k1") as server:
        url = server.base_url
        missing = await post(f"{url}/chat/completions", {"model": "m", "messages": START})
        denied = await get(f"{url}/models", status=401)
        allowed = await get(f"{url}/models", headers={"Authorization": "Bearer k1"})
    assert missing[0] == 401
    assert missing[1]["error"]["code"] == denied["error"]["code"] == "invalid_api_key"
    assert allowed["object"] == "list"


async def test_scripted_exhaustion_is_a_clear_500() -> None:
    responder = ScriptedResponder(["only step"])
    async with PolicyServer(responder) as server:
        url = f"{server.base_url}/chat/completions"
        first = await post(url, {"model": "m", "messages": START})
        second = await post(url, {"model": "m", "messages": START})
    assert first[0] == 200
    assert second[0] == 500
    assert "exhausted" in second[1]["error"]["message"]
    assert "request #2" in second[1]["error"]["message"]
    assert len(responder.requests) == 2
    assert responder.remaining == 0


async def test_scripted_exhaustion_surfaces_through_the_client() -> None:
    async with (
        PolicyServer(ScriptedResponder([])) as server,
        OpenAIPolicy(server.base_url, "m", **FAST) as client,
    ):
        with pytest.raises(PolicyError, match="scripted policy is exhausted"):
            await client.complete(START, TOOLS, SamplingParams())


async def test_responder_crash_becomes_a_500_naming_the_error() -> None:
    async def broken(request: dict[str, Any]) -> Reply:
        raise KeyError("boom")

    async with PolicyServer(broken) as server:
        status, body = await post(
            f"{server.base_url}/chat/completions", {"model": "m", "messages": START}
        )
    assert status == 500
    assert "KeyError" in body["error"]["message"]
    assert body["error"]["type"] == "server_error"


async def test_large_histories_are_accepted() -> None:
    big = [*START, {"role": "tool", "tool_call_id": "c", "content": "x" * 3_000_000}]
    async with (
        PolicyServer(builtin_responder("nop")) as server,
        OpenAIPolicy(server.base_url, "nop", **FAST) as client,
    ):
        result = await client.complete(big, TOOLS, SamplingParams())
    assert result.tool_calls[0].name == "submit"


async def test_base_url_before_start_is_an_error() -> None:
    server = PolicyServer(builtin_responder("nop"))
    with pytest.raises(PolicyConfigError, match="before start"):
        _ = server.base_url


async def test_scripted_raw_reply_is_served_verbatim() -> None:
    raw = Reply(status=200, body=b"\x00garbage", headers={"X-Test": "1"})
    async with (
        PolicyServer(ScriptedResponder([raw, raw])) as server,
        OpenAIPolicy(server.base_url, "m", **FAST) as client,
    ):
        async with aiohttp.ClientSession() as session:
            url = f"{server.base_url}/chat/completions"
            async with session.post(url, json={"model": "m", "messages": START}) as response:
                assert (response.status, await response.read()) == (200, b"\x00garbage")
                assert response.headers["X-Test"] == "1"
        with pytest.raises(PolicyResponseError, match="not JSON"):
            await client.complete(START, TOOLS, SamplingParams())
