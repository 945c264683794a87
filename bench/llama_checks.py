"""What `llama_server.py` checks against a real llama.cpp server beyond `token_checks.py`:
the server's own rendering and tokenization for those checks (``LlamaTokenizer``), and how
envfarm classes the server's answers to what goes wrong (``error_classes``)."""

from __future__ import annotations

import sys
from typing import Any

from token_checks import REPO, ServerTokenizer, http, tools


def error_classes(server: str) -> dict[str, str]:
    """How envfarm classes the real server's answers to what goes wrong: a history whose
    tool-call arguments are cut-off JSON (llama.cpp: HTTP 500 from its JSON parser), a prompt
    past the slot's context (HTTP 400), and a completion cut at ``max_tokens``."""
    import asyncio

    sys.path.insert(0, str(REPO))
    from envfarm.agent.tools import tool_schemas
    from envfarm.errors import ContextLengthExceeded, PolicyError, RequestRejected
    from envfarm.policy import CaptureOptions, EndpointSpec
    from envfarm.policy.base import SamplingParams
    from envfarm.policy.pool import EndpointPool

    cut_call = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": '{"co'}}
    cases: dict[str, list[dict[str, Any]]] = {
        "history with cut-off tool-call arguments": [
            {"role": "user", "content": "List the files."},
            {"role": "assistant", "content": None, "tool_calls": [cut_call]},
            {"role": "tool", "tool_call_id": "c", "content": "error: malformed arguments"},
        ],
        "prompt past the slot's context": [{"role": "user", "content": "word " * 6000}],
        "completion cut at max_tokens": [
            {"role": "user", "content": "Write a Python module with ten functions."}
        ],
    }

    async def main() -> dict[str, str]:
        pool = EndpointPool(
            [EndpointSpec(url=f"{server}/v1")], "qwen", capture=CaptureOptions(profile="llamacpp")
        )
        found: dict[str, str] = {}
        async with pool:
            for name, messages in cases.items():
                try:
                    done = await pool.complete(
                        messages, tool_schemas(), SamplingParams(max_tokens=8)
                    )
                    tokens = done.tokens
                    ids = tokens.completion_token_ids if tokens else None
                    outcome = (
                        f"answered: finish {done.finish_reason}, {len(ids or [])} ids, "
                        f"{done.attempts} attempt(s)"
                    )
                except (RequestRejected, ContextLengthExceeded, PolicyError) as exc:
                    kind = "retryable" if exc.retryable else "not retried"
                    status = getattr(exc, "status", None)
                    said = str(exc).rsplit("HTTP", 1)[-1][:90]
                    outcome = f"{type(exc).__name__} ({kind}, HTTP {status}): ...HTTP{said}"
                status = pool.status()[0]
                found[name] = (
                    f"{outcome}; endpoint {status.state}, "
                    f"{status.consecutive_failures} failures counted"
                )
        return found

    return asyncio.run(main())


class LlamaTokenizer(ServerTokenizer):
    """llama.cpp's ``/apply-template`` + ``/tokenize`` (what its chat endpoint runs) and
    ``/detokenize``."""

    def __init__(self, server: str, props: dict[str, Any]) -> None:
        self.server = server
        eos = props.get("eos_token") or "<|im_end|>"
        self.end_of_turn = self.tokenize(eos)

    def prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        body = {"messages": messages, "tools": tools()}
        text = http(f"{self.server}/apply-template", body)["prompt"]
        ids: list[int] = http(f"{self.server}/tokenize", {"content": text, "add_special": True})[
            "tokens"
        ]
        return ids

    def tokenize(self, text: str) -> list[int]:
        ids: list[int] = http(f"{self.server}/tokenize", {"content": text})["tokens"]
        return ids

    def detokenize(self, ids: list[int]) -> str:
        text: str = http(f"{self.server}/detokenize", {"tokens": ids})["content"]
        return text
