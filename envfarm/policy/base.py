"""The ``PolicyClient`` interface and the shapes a model call produces.

A ``Completion`` keeps tool-call arguments as the raw strings the model wrote: deciding what a
malformed call means is the agent's job, and a trajectory must record exactly what was sampled.
``raw`` keeps the whole response body so upper layers can read server extensions (token ids,
logprobs, routed experts) without this layer knowing each server's dialect. Every client
speaks the OpenAI chat shape, so ``parse_completion`` (which reads that shape and names the
missing piece when a body is unusable) lives here, next to the models it fills.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from types import TracebackType
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from envfarm.errors import PolicyResponseError
from envfarm.models.jobs import Sampling
from envfarm.policy.tokens import TokenData

EXCERPT_CHARS = 300
"""How much of a bad response body error messages quote."""


DEFAULT_TEMPERATURE = 1.0
DEFAULT_TOP_P = 1.0


class SamplingParams(Sampling):
    """Sampling of a model call: a job's ``Sampling`` and the agent's tool choice.
    ``temperature`` and ``top_p`` are always sent (1.0 when not set), so no server falls back
    to a model's own generation config unannounced."""

    tool_choice: Literal["auto", "none", "required"] | None = None
    """Whether the model may call tools; None: not sent (the server's default, ``auto``). The
    agent sends ``none`` when it asks for a summary, keeping the tools in the prompt so that
    the request extends the context the model has seen."""

    def to_request(self) -> dict[str, Any]:
        """The request fields: temperature and top_p always, the others when set."""
        sent = self.model_dump(exclude_none=True)
        sent.setdefault("temperature", DEFAULT_TEMPERATURE)
        sent.setdefault("top_p", DEFAULT_TOP_P)
        return sent


class ToolCallRaw(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    arguments: str
    """The arguments string exactly as received (may be invalid JSON)."""


RetryKind = Literal["error", "pause", "abort", "unavailable"]


class RetryRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cause: str
    """Why the attempt failed (HTTP status and body excerpt, or the connection error)."""
    delay_s: float
    """How long the client waited before the next attempt."""
    kind: RetryKind = "error"
    """``error``: a failed attempt (connection error, 5xx); ``pause``: the endpoint said 503/429
    (a weight swap or no capacity); ``abort``: the server aborted the generation, which was
    discarded and sent again; ``unavailable``: every endpoint was down, nothing was sent."""
    endpoint: str | None = None
    """Base URL of the endpoint that failed (None when nothing was sent)."""
    elapsed_s: float = 0.0
    """Duration of the failed attempt itself (for an abort: the generation time lost)."""


class Completion(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str | None
    tool_calls: list[ToolCallRaw]
    finish_reason: str | None
    usage: dict[str, int] | None
    latency_s: float
    """Duration of the attempt that succeeded (waits for earlier attempts are in ``retries``)."""
    endpoint: str
    """Base URL of the endpoint that answered."""
    model: str
    """The model name the endpoint reported (the requested one when it reported none)."""
    message: dict[str, Any]
    """The assistant message to append to the chat history, in OpenAI shape."""
    sampling: dict[str, Any]
    """The sampling parameters actually sent."""
    attempts: int = 1
    retries: list[RetryRecord] = Field(default_factory=list)
    paused_s: float = 0.0
    """Time this call lost to weight-swap pauses: waits after 503/429 and aborted generations."""
    warnings: list[str] = Field(default_factory=list)
    """Repairs made to an imperfect response (e.g. a tool call without an id got one)."""
    raw: dict[str, Any] = Field(default_factory=dict)
    """The full response body as received."""
    tokens: TokenData | None = None
    """Exact token data and policy version read from the response (``policy.profiles``)."""


class PolicyClient(ABC):
    """Something that answers a chat history with the next assistant message."""

    @abstractmethod
    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        sampling: SamplingParams,
    ) -> Completion:
        """Raise only ``envfarm.errors.PolicyError`` and its subclasses."""

    def session(self, key: str) -> PolicyClient:
        """The client one agent session (one episode, ``key``) should use for all its turns.

        An endpoint pool keeps a session's requests on one endpoint while it is healthy, so the
        server's prefix cache is reused; a single endpoint returns itself. The result shares
        this client's connections: close this client, not the session.
        """
        return self

    async def aclose(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release connections; the client may not be used afterwards."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def parse_completion(
    body: bytes,
    *,
    url: str,
    endpoint: str,
    model: str,
    sampling: dict[str, Any],
    latency_s: float,
    attempts: int = 1,
    retries: list[RetryRecord] | None = None,
    scrub: Callable[[str], str] = lambda text: text,
) -> Completion:
    """A ``Completion`` from a 200 ``chat.completion`` body, or PolicyResponseError naming
    what is missing (with a short, scrubbed excerpt of the body)."""

    def unusable(problem: str) -> PolicyResponseError:
        text = body.decode("utf-8", errors="replace").strip()
        if len(text) > EXCERPT_CHARS:
            text = text[:EXCERPT_CHARS] + f"... ({len(body)} bytes)"
        return PolicyResponseError(
            f"policy endpoint {url} answered HTTP 200 but {problem}: {scrub(text) or '(empty)'}",
            status=200,
        )

    try:
        data = json.loads(body)
    except ValueError:
        raise unusable("the body is not JSON") from None
    if not isinstance(data, dict):
        raise unusable("the body is not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise unusable("the response has no choices[0]")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise unusable("choices[0].message is missing")
    content = message.get("content")
    if isinstance(content, list):  # content parts: keep the text
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict)) or None
    if content is not None and not isinstance(content, str):
        raise unusable("choices[0].message.content is neither a string nor null")
    warnings: list[str] = []
    tool_calls = _tool_calls(message.get("tool_calls"), warnings, unusable)
    out: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in tool_calls
        ]
    usage = data.get("usage")
    finish_reason = choices[0].get("finish_reason")
    served = data.get("model")
    return Completion(
        content=content,
        tool_calls=tool_calls,
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        usage={k: v for k, v in usage.items() if type(v) is int}
        if isinstance(usage, dict)
        else None,
        latency_s=latency_s,
        endpoint=endpoint,
        model=served if isinstance(served, str) and served else model,
        message=out,
        sampling=sampling,
        attempts=attempts,
        retries=list(retries or []),
        warnings=warnings,
        raw=data,
    )


def _tool_calls(
    raw: Any, warnings: list[str], unusable: Callable[[str], PolicyResponseError]
) -> list[ToolCallRaw]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise unusable("choices[0].message.tool_calls is not a list")
    given = {c.get("id") for c in raw if isinstance(c, dict)}
    calls: list[ToolCallRaw] = []
    for index, call in enumerate(raw):
        where = f"choices[0].message.tool_calls[{index}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise unusable(f"{where}.function is missing")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise unusable(f"{where}.function.name is missing")
        arguments = function.get("arguments")
        if arguments is None:
            warnings.append(f"{where} had no arguments; recorded as an empty string")
            arguments = ""
        elif not isinstance(arguments, str):
            warnings.append(f"{where} sent arguments as JSON, not a string; re-encoded")
            arguments = json.dumps(arguments)
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            call_id = f"call_{index}"
            while call_id in given:
                call_id += "_"
            given.add(call_id)
            warnings.append(f"{where} had no id; synthesised {call_id!r}")
        calls.append(ToolCallRaw(id=call_id, name=name, arguments=arguments))
    return calls
