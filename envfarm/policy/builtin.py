"""The built-in policies ``oracle`` and ``nop``, as responders for a ``PolicyServer``.

Both are stateless: every decision is read off the request's messages, so one server can
answer any number of concurrent episodes. ``oracle`` runs the task's reference solution (which
envfarm uploads only for this policy) and then submits, once per user message: each step of a
multi-step task arrives as one, with that step's solution uploaded in place of the last;
``nop`` submits at once, giving the reward of doing nothing.
"""

from __future__ import annotations

import json
from typing import Any

from envfarm.errors import PolicyConfigError
from envfarm.policy.base import ToolCallRaw
from envfarm.policy.server import Reply, Responder, completion_reply, error_reply

ORACLE_COMMAND = "bash /solution/solve.sh"
BUILTIN_POLICIES = {"oracle", "nop"}


def builtin_responder(name: str) -> Responder:
    """The responder of built-in policy ``name`` (one of ``BUILTIN_POLICIES``)."""
    if name == "oracle":
        return _oracle
    if name == "nop":
        return _nop
    known = ", ".join(sorted(BUILTIN_POLICIES))
    raise PolicyConfigError(f"unknown built-in policy {name!r}: expected one of {known}")


async def _oracle(request: dict[str, Any]) -> Reply:
    problem = _invalid(request)
    if problem is not None:
        return problem
    messages: list[dict[str, Any]] = request["messages"]
    asked = max(i for i, m in enumerate(messages) if m.get("role") in ("user", "system"))
    since = messages[asked + 1 :]
    if any("bash" in _called_tools(m) for m in since if m.get("role") == "assistant"):
        return _call(request, messages, "submit", {})
    return _call(request, messages, "bash", {"command": ORACLE_COMMAND})


async def _nop(request: dict[str, Any]) -> Reply:
    problem = _invalid(request)
    if problem is not None:
        return problem
    return _call(request, request["messages"], "submit", {})


def _invalid(request: dict[str, Any]) -> Reply | None:
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        return error_reply(
            400, "A chat completion request needs `messages`: a non-empty list.", param="messages"
        )
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            return error_reply(
                400,
                f"messages[{index}] must be an object with a string `role`.",
                param=f"messages[{index}]",
            )
    return None


def _called_tools(message: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.add(function["name"])
    return names


def _call(
    request: dict[str, Any], messages: list[dict[str, Any]], name: str, arguments: dict[str, Any]
) -> Reply:
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    call = ToolCallRaw(id=f"call_{turn}_0", name=name, arguments=json.dumps(arguments))
    model = request.get("model")
    return completion_reply(model if isinstance(model, str) else "envfarm", tool_calls=[call])
