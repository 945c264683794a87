"""The checks `llama_server.py` runs against a real llama.cpp server: every turn's token data
against the server's own tokenizer (``check``), and how envfarm classes the server's answers to
what goes wrong (``error_classes``). The module docstring of `llama_server.py` lists them."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def http(url: str, body: Any = None, timeout: float = 600) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


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


class Checks:
    """Each named check's passes and failures over all turns (or segments) of a mode."""

    def __init__(self) -> None:
        self.passed: dict[str, int] = {}
        self.failed: dict[str, int] = {}
        self.problems: list[str] = []

    def __call__(self, name: str, ok: bool, where: str, detail: str = "") -> bool:
        (self.passed if ok else self.failed)[name] = (self.passed if ok else self.failed).get(
            name, 0
        ) + 1
        if not ok:
            self.problems.append(f"{where}: {name} {detail}".rstrip())
        return ok

    def table(self) -> dict[str, str]:
        names = sorted({*self.passed, *self.failed})
        return {
            n: f"{self.passed.get(n, 0)}/{self.passed.get(n, 0) + self.failed.get(n, 0)}"
            for n in names
        }


def server_prompt(server: str, messages: list[dict[str, Any]]) -> list[int]:
    """The server's own ids for a request of ``messages`` (what its chat endpoint runs)."""
    text = http(f"{server}/apply-template", {"messages": messages, "tools": tools()})["prompt"]
    ids: list[int] = http(f"{server}/tokenize", {"content": text, "add_special": True})["tokens"]
    return ids


def segment_messages(trajectory: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """Each context segment's messages as sent (the last segment's are ``messages``)."""
    prior = [s["prior_messages"] for s in trajectory.get("segments") or []]
    return [*prior, trajectory["messages"]]


def request_messages(messages: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """What the segment's k-th model call sent: the messages before its k-th answer."""
    answers = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    return messages[: answers[k]] if k < len(answers) else messages


def check_turn(server: str, mode: str, turn: dict[str, Any], where: str, checks: Checks) -> bool:
    prompt, ids = turn["prompt_token_ids"], turn["completion_token_ids"]
    logprobs, texts = turn["logprobs"], turn["completion_tokens"]
    complete = not turn["faults"] and None not in (prompt, ids, logprobs)
    if not checks("ids and logprobs present, no fault", complete, where, str(turn["faults"])):
        return False
    checks("as many logprobs as ids", len(ids) == len(logprobs), where)
    counted = (turn["usage"] or {}).get("prompt_tokens")
    checks("prompt ids = server's prompt count", counted == len(prompt), where, f"{counted}")
    # /detokenize renders special tokens (the end-of-turn token), the token texts not
    pieces = {http(f"{server}/detokenize", {"tokens": part})["content"] for part in (ids, ids[:-1])}
    checks("/detokenize(ids) = token texts", texts is not None and "".join(texts) in pieces, where)
    return True


def check(server: str, mode: str, out: Path, props: dict[str, Any]) -> dict[str, Any]:
    trajectories = [json.loads(line) for line in (out / "trajectories.jsonl").open()]
    checks = Checks()
    end = http(f"{server}/tokenize", {"content": props.get("eos_token") or "<|im_end|>"})["tokens"]
    latencies: list[float] = []
    for trajectory in trajectories:
        name = trajectory["trajectory_id"]
        segments = segment_messages(trajectory)
        by_segment: dict[int, list[dict[str, Any]]] = {}
        for turn in trajectory["turns"]:
            by_segment.setdefault(turn["segment"], []).append(turn)
        for segment, turns in by_segment.items():
            messages = segments[segment] if segment < len(segments) else []
            previous: list[int] | None = None
            for k, turn in enumerate(turns):
                where = f"{name} turn {turn['index']}"
                latencies.append(turn["latency_s"])
                if not check_turn(server, mode, turn, where, checks):
                    previous = None
                    continue
                prompt = turn["prompt_token_ids"]
                if mode == "chat":
                    own = server_prompt(server, request_messages(messages, k))
                    checks(
                        "prompt ids = server's /apply-template + /tokenize", own == prompt, where
                    )
                elif k == 0:
                    own = server_prompt(server, request_messages(messages, k))
                    checks(
                        "first prompt = server's /apply-template + /tokenize", own == prompt, where
                    )
                elif previous is not None:
                    extends = prompt[: len(previous)] == previous
                    checks("prompt = previous prompt + sampled ids + ...", extends, where)
                    added = prompt[len(previous) :]
                    if added[: len(end)] == end and previous[-len(end) :] != end:
                        added = added[len(end) :]
                    text = http(f"{server}/detokenize", {"tokens": added})["content"]
                    again = http(f"{server}/tokenize", {"content": text})["tokens"]
                    checks(
                        "... + the server's /tokenize of the new messages", again == added, where
                    )
                previous = prompt + turn["completion_token_ids"]
        if mode == "tokens":
            check_samples(trajectory, checks)
    rewards = [t["reward"]["value"] for t in trajectories if t["reward"]["valid"]]
    rewards = [r for r in rewards if r is not None]
    return {
        "episodes": len(trajectories),
        "valid": len(rewards),
        "rewards": rewards,
        "mean_reward": round(sum(rewards) / len(rewards), 3) if rewards else None,
        "errors": sorted({(t["error"] or {}).get("type", "") for t in trajectories} - {""}),
        "turns": len(latencies),
        "s_per_turn": round(sum(latencies) / len(latencies), 1) if latencies else None,
        "samples": sum(len(t["samples"] or []) for t in trajectories),
        "tokens_sampled": sum(
            len(turn["completion_token_ids"] or []) for t in trajectories for turn in t["turns"]
        ),
        "stop_reasons": sorted(
            {(t["outcome"] or {}).get("stop_reason") or "-" for t in trajectories}
        ),
        "malformed": sum((t["outcome"] or {}).get("malformed_tool_calls", 0) for t in trajectories),
        "checks": checks.table(),
        "problems": checks.problems,
    }


def check_samples(trajectory: dict[str, Any], checks: Checks) -> None:
    """Each segment's sample is its last prompt and completion, sampled ids under the mask."""
    turns = trajectory["turns"]
    for sample in trajectory["samples"] or []:
        where = f"{trajectory['trajectory_id']} sample {sample['turns']}"
        members = [t for t in turns if t["index"] in sample["turns"]]
        last = members[-1]
        whole = last["prompt_token_ids"] + last["completion_token_ids"]
        masked = [t for t, m in zip(sample["token_ids"], sample["loss_mask"], strict=True) if m]
        sampled = [i for t in members for i in t["completion_token_ids"]]
        same = sample["token_ids"] == whole and masked == sampled
        checks("merged sample = what was sent and sampled", same, where)
    segments = {t["segment"] for t in turns if t["prompt_token_ids"] is not None}
    merged = len(trajectory["samples"] or []) == len(segments)
    checks("one merged sample per context segment", merged, trajectory["trajectory_id"])


def tools() -> list[dict[str, Any]]:
    sys.path.insert(0, str(REPO))
    from envfarm.agent.tools import tool_schemas

    return tool_schemas()
