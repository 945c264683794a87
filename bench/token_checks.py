"""Every turn of a real server's `envfarm run` checked against the server's own tokenizer.

Shared by `llama_server.py` and `vllm_server.py`: each server's API for rendering, tokenizing
and detokenizing is a ``ServerTokenizer`` (``LlamaTokenizer`` in `llama_checks.py`,
``VLLMTokenizer`` in `vllm_checks.py`); ``check`` reads a run's ``trajectories.jsonl`` and
checks, for every turn:

- it has prompt ids, completion ids and logprobs, of equal lengths, and no fault;
- the prompt ids are as many as the server says it evaluated (``usage.prompt_tokens``);
- the server's detokenization of the completion ids (but a final end-of-turn token, whose
  text some servers leave out of the token texts) is the concatenation of the token texts;
- chat mode: the prompt ids are the server's rendering of exactly the messages that turn sent
  (rebuilt here from the stored trajectory, independently of envfarm);
- token mode: the first prompt of each context segment is the server's rendering of its first
  messages; every later prompt is the previous prompt, then exactly the ids sampled, then (but
  an end-of-turn token the model did not sample) ids the server tokenizes out of their own
  text; each segment's merged sample is exactly the concatenation of what was sent and
  sampled, with the sampled ids under the loss mask.

Beside the checks it reports the run's figures: episodes, valid rewards, turns with exact
token data, re-asks, and where a turn's time goes (``turn_times``).
"""

from __future__ import annotations

import json
import statistics
import sys
import urllib.request
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def http(url: str, body: Any = None, timeout: float = 600, method: str | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"}, method=method
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        raw = response.read()
        return json.loads(raw) if raw else None


def tools() -> list[dict[str, Any]]:
    sys.path.insert(0, str(REPO))
    from envfarm.agent.tools import tool_schemas

    return tool_schemas()


class ServerTokenizer(ABC):
    """A server's own rendering and tokenization (what its chat endpoint runs)."""

    server: str
    end_of_turn: list[int]
    """The ids of the template's end-of-message token (Qwen: ``<|im_end|>``)."""

    @abstractmethod
    def prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        """The ids a chat request of ``messages`` (with envfarm's tools) runs."""

    @abstractmethod
    def tokenize(self, text: str) -> list[int]:
        """The ids of ``text`` alone (special tokens parsed, none added)."""

    @abstractmethod
    def detokenize(self, ids: list[int]) -> str:
        """The text of ``ids``, special tokens rendered."""


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


def segment_messages(trajectory: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """Each context segment's messages as sent (the last segment's are ``messages``)."""
    prior = [s["prior_messages"] for s in trajectory.get("segments") or []]
    return [*prior, trajectory["messages"]]


def request_messages(messages: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """What the segment's k-th model call sent: the messages before its k-th answer."""
    answers = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    return messages[: answers[k]] if k < len(answers) else messages


def exact(turn: dict[str, Any]) -> bool:
    """The turn has prompt ids, completion ids and logprobs of equal length, and no fault."""
    prompt, ids, logprobs = turn["prompt_token_ids"], turn["completion_token_ids"], turn["logprobs"]
    return (
        not turn["faults"]
        and None not in (prompt, ids, logprobs)
        and bool(prompt)
        and len(ids) == len(logprobs)
    )


def check_turn(
    tokenizer: ServerTokenizer, turn: dict[str, Any], where: str, checks: Checks
) -> bool:
    prompt, ids = turn["prompt_token_ids"], turn["completion_token_ids"]
    logprobs, texts = turn["logprobs"], turn["completion_tokens"]
    complete = not turn["faults"] and None not in (prompt, ids, logprobs)
    detail = str(turn["faults"] or turn.get("token_source_reason") or "")
    if not checks("ids and logprobs present, no fault", complete, where, detail):
        return False
    checks("as many logprobs as ids", len(ids) == len(logprobs), where)
    counted = (turn["usage"] or {}).get("prompt_tokens")
    checks("prompt ids = server's prompt count", counted == len(prompt), where, f"{counted}")
    # the end-of-turn token's text may be left out of the token texts
    pieces = {tokenizer.detokenize(part) for part in (ids, ids[:-1])}
    joined = "".join(texts) if texts is not None else None
    checks("detokenize(ids) = token texts", joined in pieces, where, repr(joined)[:80])
    return True


def check_prompts(
    tokenizer: ServerTokenizer,
    mode: str,
    trajectory: dict[str, Any],
    checks: Checks,
) -> None:
    """Each turn's prompt against the server's rendering (chat) or the one before (tokens)."""
    end = tokenizer.end_of_turn
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
            if not check_turn(tokenizer, turn, where, checks):
                previous = None
                continue
            prompt = turn["prompt_token_ids"]
            if mode == "chat":
                own = tokenizer.prompt(request_messages(messages, k))
                checks("prompt ids = server's rendering of the messages", own == prompt, where)
            elif k == 0:
                own = tokenizer.prompt(request_messages(messages, k))
                checks("first prompt = server's rendering of the messages", own == prompt, where)
            elif previous is not None:
                extends = prompt[: len(previous)] == previous
                checks("prompt = previous prompt + sampled ids + ...", extends, where)
                added = prompt[len(previous) :]
                if added[: len(end)] == end and previous[-len(end) :] != end:
                    added = added[len(end) :]
                again = tokenizer.tokenize(tokenizer.detokenize(added))
                checks("... + the server's tokenization of the new messages", again == added, where)
            previous = prompt + turn["completion_token_ids"]


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


def read_run(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "trajectories.jsonl").open()]


def turn_times(trajectories: list[dict[str, Any]]) -> dict[str, float | None]:
    """Where a turn's time goes, in seconds per turn (means over all turns): the request as
    envfarm timed it (``latency_s``), the server's own prompt and generation time when the
    answer reports it (llama.cpp's ``timings``), and envfarm's own time, the agent phase less
    the model calls, their retries and pauses, and the tools' commands."""
    turns = [turn for t in trajectories for turn in t["turns"]]
    if not turns:
        return {}
    own = 0.0
    for trajectory in trajectories:
        agent = trajectory["timings"].get("agent_s") or 0.0
        calls = sum(t["latency_s"] + t.get("paused_s", 0.0) for t in trajectory["turns"])
        commands = sum(r["duration_s"] for t in trajectory["turns"] for r in t["tool_results"])
        own += agent - calls - commands
    timed = [t["server_timings"] for t in turns if t.get("server_timings")]
    server = (
        sum(s.get("prompt_ms", 0.0) + s.get("predicted_ms", 0.0) for s in timed) / len(timed) / 1e3
        if timed
        else None
    )
    return {
        "request_s": round(statistics.fmean(t["latency_s"] for t in turns), 3),
        "server_s": round(server, 3) if server is not None else None,
        "envfarm_own_s": round(own / len(turns), 4),
    }


def check(tokenizer: ServerTokenizer, mode: str, out: Path) -> dict[str, Any]:
    """Every turn of the run in ``out`` checked (the module docstring), and its figures."""
    trajectories = read_run(out)
    checks = Checks()
    for trajectory in trajectories:
        check_prompts(tokenizer, mode, trajectory, checks)
        if mode == "tokens" and trajectory.get("samples") is not None:  # run with --samples
            check_samples(trajectory, checks)
    turns = [turn for t in trajectories for turn in t["turns"]]
    rewards = [t["reward"]["value"] for t in trajectories if t["reward"]["valid"]]
    rewards = [r for r in rewards if r is not None]
    return {
        "episodes": len(trajectories),
        "valid": len(rewards),
        "rewards": rewards,
        "mean_reward": round(sum(rewards) / len(rewards), 3) if rewards else None,
        "errors": sorted({(t["error"] or {}).get("type", "") for t in trajectories} - {""}),
        "turns": len(turns),
        "exact_turns": sum(1 for turn in turns if exact(turn)),
        "token_reasks": sum(1 for turn in turns if turn.get("token_reask")),
        "s_per_turn": round(statistics.fmean(t["latency_s"] for t in turns), 1) if turns else None,
        **turn_times(trajectories),
        "samples": sum(len(t["samples"] or []) for t in trajectories),
        "tokens_sampled": sum(len(turn["completion_token_ids"] or []) for turn in turns),
        "stop_reasons": sorted(
            {(t["outcome"] or {}).get("stop_reason") or "-" for t in trajectories}
        ),
        "malformed": sum((t["outcome"] or {}).get("malformed_tool_calls", 0) for t in trajectories),
        "checks": checks.table(),
        "problems": checks.problems,
    }


MEANS_PER_TURN = ("s_per_turn", "request_s", "server_s", "envfarm_own_s")
MEANS_PER_REQUEST = ("server_e2e_s", "server_prefill_s", "server_decode_s", "server_queue_s")
SETS = ("errors", "stop_reasons", "exit_codes", "profiles")


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of several runs of one mode as one: counts added, lists joined, each check's
    passes added, means per turn (or per server request) weighted by their counts, the load
    averaged and its highest sample. Figures that do not add (medians) are left to the caller."""
    total: dict[str, Any] = {"runs": len(runs)}
    turns = sum(r["turns"] for r in runs)
    for key, first in runs[0].items():
        values = [r[key] for r in runs]
        weight = "turns" if key in MEANS_PER_TURN else "server_requests"
        if key == "checks":
            total[key] = add_checks(values)
        elif key in SETS:
            total[key] = sorted({x for v in values for x in v})
        elif isinstance(first, list):
            total[key] = [x for v in values for x in v]
        elif key in MEANS_PER_TURN or key in MEANS_PER_REQUEST:
            weighted = [(v, r[weight]) for v, r in zip(values, runs, strict=True) if v is not None]
            share = sum(n for _, n in weighted)
            total[key] = round(sum(v * n for v, n in weighted) / share, 4) if share else None
        elif key == "load_mean":
            total[key] = round(sum(values) / len(values), 1)
        elif key == "load_max":
            total[key] = max(values)
        elif key.startswith("logprob_diff"):
            continue
        elif isinstance(first, int | float):
            total[key] = round(sum(values), 1)
    rewards = total["rewards"]
    total["mean_reward"] = round(sum(rewards) / len(rewards), 3) if rewards else None
    total["turns"] = turns
    return total


def add_checks(tables: list[dict[str, str]]) -> dict[str, str]:
    """Check tables (``"passed/all"`` per check) added up."""
    passed: dict[str, int] = {}
    ran: dict[str, int] = {}
    for table in tables:
        for name, figure in table.items():
            a, b = figure.split("/")
            passed[name] = passed.get(name, 0) + int(a)
            ran[name] = ran.get(name, 0) + int(b)
    return {name: f"{passed[name]}/{ran[name]}" for name in sorted(ran)}
