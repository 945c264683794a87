"""Response bodies of the fake server in the shapes vLLM and SGLang really send.

vLLM (non-streaming chat): ``prompt_token_ids`` at the root (null unless
``return_token_ids``), and per choice ``token_ids``, ``logprobs.content[]``, ``stop_reason``
and ``routed_experts`` (null unless the server was started with routed experts). SGLang:
``metadata.weight_version`` at the root, ``sglext.routed_experts`` when asked for, and per
choice ``matched_stop``, ``prompt_token_ids`` / ``token_ids`` / ``meta_info`` when asked for;
``meta_info`` carries ``finish_reason`` as ``{type, matched}``, ``weight_version``,
``output_token_logprobs`` as ``[logprob, token_id, text]`` and ``routed_experts``.
"""

from __future__ import annotations

import base64
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from envfarm.testing import fake_tokens as ft


@dataclass(frozen=True)
class Routing:
    """Whether and how the fake server returns routed experts."""

    enabled: bool = False
    format: Literal["npy", "lists"] = "npy"
    """vLLM only: a base64 ``.npy`` file (later releases) or nested lists (earlier ones)."""
    layers: int = 2
    top_k: int = 2


@dataclass
class FakeAnswer:
    """One answer's data, rendered in vLLM's or SGLang's response shape."""

    request: dict[str, Any]
    prompt: list[int]
    ids: list[int]
    logprobs: list[float]
    content: str | None
    tool_calls: list[dict[str, Any]]
    finish: str
    spans: list[dict[str, Any]] | None
    version: str | None

    def __post_init__(self) -> None:
        model = self.request.get("model")
        self.head: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model if isinstance(model, str) else "fake",
        }
        self.usage = {
            "prompt_tokens": len(self.prompt),
            "total_tokens": len(self.prompt) + len(self.ids),
            "completion_tokens": len(self.ids),
        }

    def openai_logprobs(self) -> dict[str, Any] | None:
        if not self.request.get("logprobs"):
            return None
        content = [
            {"token": ft.token_text(t), "logprob": lp, "bytes": [t], "top_logprobs": []}
            for t, lp in zip(self.ids, self.logprobs, strict=False)
        ]
        return {"content": content}

    def routed(self, routing: Routing) -> list[list[list[int]]]:
        """Routing of every token the model ran on: prompt and completion but the last."""
        tokens = max(0, len(self.prompt) + len(self.ids) - 1)
        return ft.routing(tokens, routing.layers, routing.top_k)

    def vllm(self, routing: Routing) -> dict[str, Any]:
        tokens = bool(self.request.get("return_token_ids"))
        message: dict[str, Any] = {
            "role": "assistant",
            "content": self.content,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "reasoning": None,
        }
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        routed: Any = None
        if routing.enabled:
            nested = self.routed(routing)
            routed = nested if routing.format == "lists" else ft.npy_base64(nested)
        choice = {
            "index": 0,
            "message": message,
            "logprobs": self.openai_logprobs(),
            "finish_reason": self.finish,
            "stop_reason": None,
            "token_ids": self.ids if tokens else None,
            "routed_experts": routed,
        }
        return {
            **self.head,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": {**self.usage, "prompt_tokens_details": None},
            "prompt_logprobs": None,
            "prompt_token_ids": self.prompt if tokens else None,
            "kv_transfer_params": None,
        }

    def sglang(self, routing: Routing, *, token_ids: bool = True) -> dict[str, Any]:
        """``token_ids`` False: an SGLang release before ``return_token_ids`` existed."""
        request, version = self.request, self.version or "default"
        routed = None
        if routing.enabled and request.get("return_routed_experts"):
            routed = base64.b64encode(ft.int32_bytes(self.routed(routing))).decode()
        message = {
            "role": "assistant",
            "content": self.content or "",
            "reasoning_content": None,
            "tool_calls": [{**c, "index": i} for i, c in enumerate(self.tool_calls)] or None,
        }
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "logprobs": self.openai_logprobs(),
            "finish_reason": self.finish,
            "matched_stop": None,
        }
        if request.get("return_prompt_token_ids"):
            choice["prompt_token_ids"] = self.prompt
        if request.get("return_token_ids") and token_ids:
            choice["token_ids"] = self.ids
        if request.get("return_meta_info"):
            choice["meta_info"] = self.meta_info(version, routed)
        body = {
            **self.head,
            "choices": [choice],
            "usage": {**self.usage, "prompt_tokens_details": None, "reasoning_tokens": 0},
            "metadata": {"weight_version": version},
        }
        if routed is not None:
            body["sglext"] = {"routed_experts": routed}
        return body

    def meta_info(self, version: str, routed: str | None) -> dict[str, Any]:
        finish: dict[str, Any] = {"type": "stop", "matched": 10}
        if self.finish == "abort":
            finish = {"type": "abort", "message": "Abort in waiting queue"}
        meta: dict[str, Any] = {
            "id": self.head["id"].removeprefix("chatcmpl-"),
            "finish_reason": finish,
            "prompt_tokens": len(self.prompt),
            "weight_version": version,
            "total_retractions": 0,
            "completion_tokens": len(self.ids),
            "cached_tokens": 0,
            "e2e_latency": 0.001,
        }
        if self.request.get("logprobs"):
            meta["output_token_logprobs"] = [
                [lp, t, None] for lp, t in zip(self.logprobs, self.ids, strict=False)
            ]
        if routed is not None:
            meta["routed_experts"] = routed
        if self.spans is not None:
            meta["weight_versions"] = self.spans
        return meta
