"""A fake vLLM (or SGLang) chat server: real response shapes, token data, scripted behaviour.

Serve it with ``PolicyServer`` for tests, or run ``python -m envfarm.testing.fake_vllm`` for a
dry run of a training setup without a GPU. It answers ``/v1/chat/completions`` the way the
real servers do (fields only when the request asks for them, see ``policy.profiles``):
prompt and completion token ids, logprobs, routed experts, and the policy version (a response
header, and SGLang's ``weight_version`` in the body). Tokens come from ``fake_tokens``: the
UTF-8 bytes of an append-only chat template, so prompts extend across turns exactly.

What the "model" does is scripted: by default it runs ``commands`` one per turn through the
``bash`` tool, then calls ``submit`` (decided from the request alone, so one server can drive
many concurrent sessions); any ``planner`` returning a ``ScriptedCompletion`` can replace it.
Asked for a summary (``tool_choice: "none"``, as the agent's self-summarization request is),
the default planner writes one that records how many commands it has run, and reads it back
from a restarted context, so it drives sessions of any length across summaries.
Faults are injected per request number (``faults``) or at random (``fault_rates``, seeded):
``unavailable`` (503, weight swap), ``rate_limited`` (429), ``abort`` (finish_reason "abort"
with half the tokens), ``garbage`` (a 200 that is not JSON), ``slow``, ``mismatch`` (one
logprob short), ``omit`` (no token data, as if the request had not asked for it) and ``swap``
(the version changes mid-generation).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from envfarm.policy.profiles import CAPTURE_FIELDS, DEFAULT_VERSION_HEADER
from envfarm.policy.server import PolicyServer, Reply, error_reply
from envfarm.testing import fake_tokens as ft
from envfarm.testing.fake_shapes import FakeAnswer, Routing
from envfarm.testing.scripted import ScriptedCompletion, completion, tool_call

FaultKind = Literal[
    "unavailable", "rate_limited", "abort", "garbage", "slow", "mismatch", "omit", "swap"
]
Planner = Callable[[dict[str, Any]], ScriptedCompletion]


class Fault(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: FaultKind
    delay_s: float = 0.5
    """``slow``: how long the answer takes."""
    retry_after_s: float | None = None
    """``unavailable``, ``rate_limited``: the Retry-After header to send."""
    version: str = "swapped"
    """``swap``: the version the weights are swapped to, from completion token ``at`` on."""
    at: int = 1


_PROGRESS = re.compile(r"\[fake-progress: (\d+) commands run\]")


def steps_done(messages: Sequence[dict[str, Any]]) -> int:
    """Commands the fake model has run: those its last summary in the context records, plus
    its replies since (one command each)."""
    done = 0
    for message in messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str):
            found = _PROGRESS.findall(content)
            done = int(found[-1]) if found else done
        elif message.get("role") == "assistant" and message.get("tool_calls"):
            done += 1
    return done


def command_planner(commands: Sequence[str]) -> Planner:
    """Run ``commands`` with ``bash``, one per turn, then ``submit``; summarize when asked."""

    def plan(request: dict[str, Any]) -> ScriptedCompletion:
        done = steps_done(request.get("messages", []))
        if request.get("tool_choice") == "none":
            ran = "; ".join(commands[max(0, done - 3) : done])
            return completion(f"[fake-progress: {done} commands run] Last ones: {ran}.")
        if done < len(commands):
            return completion(f"Step {done + 1}.", tool_call("bash", {"command": commands[done]}))
        return completion("Done.", tool_call("submit", {}))

    return plan


class FakeVLLM:
    """A ``PolicyServer`` responder. ``version`` may be changed at any time (a weight swap)."""

    def __init__(
        self,
        *,
        dialect: Literal["vllm", "sglang"] = "vllm",
        commands: Sequence[str] = (),
        planner: Planner | None = None,
        version: str | None = "0",
        version_header: str | None = DEFAULT_VERSION_HEADER,
        routed_experts: bool = False,
        routed_format: Literal["npy", "lists"] = "npy",
        moe_layers: int = 2,
        top_k: int = 2,
        sglang_token_ids: bool = True,
        faults: Mapping[int, Fault | FaultKind] | None = None,
        fault_rates: Mapping[FaultKind, float] | None = None,
        seed: int = 0,
        delay_s: float = 0.0,
    ) -> None:
        self.dialect, self.version, self.version_header = dialect, version, version_header
        self.planner = planner or command_planner(commands)
        self.routing = Routing(
            enabled=routed_experts, format=routed_format, layers=moe_layers, top_k=top_k
        )
        self.sglang_token_ids = sglang_token_ids
        self.faults = {
            i: f if isinstance(f, Fault) else Fault(kind=f) for i, f in (faults or {}).items()
        }
        self.fault_rates = dict(fault_rates or {})
        self.delay_s = delay_s
        self._random = random.Random(seed)
        self.requests: list[dict[str, Any]] = []
        self.replies: list[Reply] = []
        """Every answer, in request order (the token data a trajectory must reproduce)."""

    async def __call__(self, request: dict[str, Any]) -> Reply:
        index = len(self.requests)
        self.requests.append(request)
        fault = self._fault(index)
        delay = self.delay_s + (fault.delay_s if fault and fault.kind == "slow" else 0.0)
        if delay:
            await asyncio.sleep(delay)
        reply = self._reply(request, fault)
        self.replies.append(reply)
        return reply

    def _fault(self, index: int) -> Fault | None:
        if index in self.faults:
            return self.faults[index]
        for kind, rate in self.fault_rates.items():
            if self._random.random() < rate:
                return Fault(kind=kind)
        return None

    def _reply(self, request: dict[str, Any], fault: Fault | None) -> Reply:
        kind = fault.kind if fault else None
        if kind in ("unavailable", "rate_limited"):
            status = 503 if kind == "unavailable" else 429
            reply = error_reply(
                status,
                "generation is paused for a weight update; retry shortly",
                type="service_unavailable" if status == 503 else "rate_limit_error",
                code="paused" if status == 503 else "rate_limited",
            )
            if fault and fault.retry_after_s is not None:
                reply.headers["Retry-After"] = f"{fault.retry_after_s:g}"
            return reply
        if kind == "garbage":
            return Reply(body=b"<html><body>502 Bad Gateway</body></html>")
        return self._completion(request, fault)

    def _completion(self, request: dict[str, Any], fault: Fault | None) -> Reply:
        messages = request.get("messages") or []
        prompt = ft.tokenize(ft.render_prompt(messages, request.get("tools") or []))
        step = self.planner(request)
        calls = [(c.name, c.arguments) for c in step.tool_calls]
        ids = ft.tokenize(ft.assistant_body(step.content, calls) + ft.END)
        content, finish = step.content, "tool_calls" if calls else "stop"
        if fault and fault.kind == "abort":
            ids = ids[: len(ids) // 2]
            content, calls, finish = bytes(ids).decode("utf-8", errors="ignore"), [], "abort"
        tool_calls = [
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
            for name, arguments in calls
        ]
        logprobs = [ft.logprob(t, i) for i, t in enumerate(ids)]
        if fault and fault.kind == "mismatch":
            logprobs = logprobs[:-1]
        spans = None
        if fault and fault.kind == "swap":
            old, at = self.version or "0", min(fault.at, len(ids))
            spans = [
                {"version": old, "start": 0, "end": at},
                {"version": fault.version, "start": at, "end": len(ids)},
            ]
            self.version = fault.version
        if fault and fault.kind == "omit":
            request = {k: v for k, v in request.items() if k not in CAPTURE_FIELDS}
        answer = FakeAnswer(
            request, prompt, ids, logprobs, content, tool_calls, finish, spans, self.version
        )
        if self.dialect == "sglang":
            body = answer.sglang(self.routing, token_ids=self.sglang_token_ids)
        else:
            body = answer.vllm(self.routing)
        headers = {}
        if self.version_header and self.version is not None:
            headers[self.version_header] = self.version
        return Reply(body=body, headers=headers)


async def _serve(args: argparse.Namespace) -> None:
    commands = args.command + [f"echo step {i + 1}" for i in range(args.steps)]
    fake = FakeVLLM(
        dialect=args.dialect,
        commands=commands,
        version=args.version,
        routed_experts=args.routed_experts,
    )
    async with PolicyServer(fake, host=args.host, port=args.port) as server:
        print(
            f"fake {args.dialect} policy server at {server.base_url} (Ctrl-C to stop)", flush=True
        )
        await asyncio.Event().wait()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m envfarm.testing.fake_vllm",
        description="A fake vLLM/SGLang chat server with exact token data, for dry runs.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--dialect", choices=["vllm", "sglang"], default="vllm")
    parser.add_argument(
        "--command", action="append", default=[], help="bash command for turn N (repeatable)"
    )
    parser.add_argument(
        "--steps", type=int, default=0, help="N more turns, each running `echo step I`"
    )
    parser.add_argument("--version", default="0", help="policy version to report")
    parser.add_argument("--routed-experts", action="store_true", help="return routed experts")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
