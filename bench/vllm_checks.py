"""What `vllm_server.py` checks against a real vLLM server beyond `token_checks.py`.

- ``VLLMTokenizer``: vLLM's own ``/tokenize`` (messages with envfarm's tools and the generation
  prompt, or a text) and ``/detokenize``, for the token checks every turn goes through.
- ``rescore``: each turn's sampled ids scored again by the server as a prompt
  (``/v1/completions`` with the turn's prompt and completion ids, ``prompt_logprobs: 0``), and
  the difference to the logprobs the turn recorded. Both are the raw model's log-softmax (vLLM's
  default ``logprobs_mode``; envfarm sends temperature and top-p 1), so they differ only by the
  arithmetic of a different batch: bf16 on a CPU is not bit-exact, so the median and maximum
  are reported, and an id the re-scoring does not give back is a failure.
- ``Metrics``: the server's ``/metrics`` counters and histograms, for what a run cost the
  server (requests, prefill and decode seconds) beside what envfarm measured.
"""

from __future__ import annotations

import re
import statistics
import urllib.request
from pathlib import Path
from typing import Any

from token_checks import ServerTokenizer, exact, http, read_run, tools


class VLLMTokenizer(ServerTokenizer):
    """vLLM's ``/tokenize`` and ``/detokenize`` (the chat endpoint renders the same way)."""

    def __init__(self, server: str, model: str) -> None:
        self.server, self.model = server, model
        self.end_of_turn = self.tokenize("<|im_end|>")

    def prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        body = {
            "model": self.model,
            "messages": messages,
            "tools": tools(),
            "add_generation_prompt": True,
            "add_special_tokens": False,
        }
        ids: list[int] = http(f"{self.server}/tokenize", body)["tokens"]
        return ids

    def tokenize(self, text: str) -> list[int]:
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        ids: list[int] = http(f"{self.server}/tokenize", body)["tokens"]
        return ids

    def detokenize(self, ids: list[int]) -> str:
        text: str = http(f"{self.server}/detokenize", {"model": self.model, "tokens": ids})[
            "prompt"
        ]
        return text


def rescore(server: str, model: str, out: Path) -> tuple[dict[str, Any], list[str]]:
    """Each exact turn's sampled logprobs against the server's re-scoring of the same ids: the
    figures (the differences themselves under ``_diffs``, for runs to be combined) and the
    problems found."""
    differences: list[float] = []
    problems: list[str] = []
    for trajectory in read_run(out):
        for turn in trajectory["turns"]:
            if not exact(turn) or not turn["completion_token_ids"]:
                continue
            prompt, ids = turn["prompt_token_ids"], turn["completion_token_ids"]
            body = {
                "model": model,
                "prompt": prompt + ids,
                "max_tokens": 1,
                "temperature": 0,
                "prompt_logprobs": 0,
            }
            scored = http(f"{server}/v1/completions", body)["choices"][0]["prompt_logprobs"]
            for position, (token, logprob) in enumerate(
                zip(ids, turn["logprobs"], strict=True), len(prompt)
            ):
                entry = (scored[position] or {}).get(str(token))
                if entry is None:
                    where = f"{trajectory['trajectory_id']} turn {turn['index']}"
                    problems.append(f"{where}: re-scoring has no logprob for id {token}")
                    continue
                differences.append(abs(entry["logprob"] - logprob))
    return {
        "rescored_tokens": len(differences),
        "_diffs": differences,
        **diff_stats(differences),
    }, problems


def diff_stats(differences: list[float]) -> dict[str, float | None]:
    """The median, 99th percentile and maximum of logprob differences."""
    if not differences:
        return {"logprob_diff_median": None, "logprob_diff_p99": None, "logprob_diff_max": None}
    ordered = sorted(differences)
    return {
        "logprob_diff_median": round(statistics.median(ordered), 6),
        "logprob_diff_p99": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 6),
        "logprob_diff_max": round(ordered[-1], 6),
    }


SAMPLE = re.compile(r"^(vllm:[\w:]+?)(?:\{([^}]*)\})? ([-+\d.eE]+|NaN)$")
UNANSWERED = ('finished_reason="abort"', 'finished_reason="error"')
"""Requests the server counts as finished without an answer (a client gone, an error)."""


class Metrics:
    """A snapshot of the server's ``/metrics`` (series of one name added over their labels)."""

    def __init__(self, server: str) -> None:
        with urllib.request.urlopen(f"{server}/metrics", timeout=30) as response:
            text = response.read().decode()
        self.values: dict[str, float] = {}
        for line in text.splitlines():
            found = SAMPLE.match(line)
            if not found or found.group(3) == "NaN":
                continue
            name, labels, value = found.group(1), found.group(2) or "", float(found.group(3))
            if name == "vllm:request_success_total" and any(u in labels for u in UNANSWERED):
                name = "vllm:request_unanswered_total"
            self.values[name] = self.values.get(name, 0.0) + value

    def get(self, name: str) -> float:
        return self.values.get(name, 0.0)

    @property
    def requests(self) -> int:
        """Generation requests the server answered (finished by a stop, the length limit or a
        repetition; not those aborted or failed)."""
        return int(self.get("vllm:request_success_total"))


SERVER_TIMES = {
    "server_e2e_s": "vllm:e2e_request_latency_seconds",
    "server_prefill_s": "vllm:request_prefill_time_seconds",
    "server_decode_s": "vllm:request_decode_time_seconds",
    "server_queue_s": "vllm:request_queue_time_seconds",
}


def server_time(before: Metrics, after: Metrics) -> dict[str, float | None]:
    """What the requests between two snapshots cost the server, in seconds per request: its
    end-to-end time, prefill, decode and queueing (vLLM's own histograms)."""
    requests = after.requests - before.requests
    figures: dict[str, float | None] = {"server_requests": requests}
    for key, name in SERVER_TIMES.items():
        spent = after.get(f"{name}_sum") - before.get(f"{name}_sum")
        figures[key] = round(spent / requests, 4) if requests > 0 else None
    return figures
