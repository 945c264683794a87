"""Token-in/token-out requests: a prompt of token ids in, the sampled ids and logprobs out.

One endpoint per server, with exactly the ids envfarm built (nothing is re-tokenized):

- vLLM ``POST /v1/completions`` with ``prompt`` a list of ids, ``logprobs: 1`` and
  ``return_token_ids``: ``choices[0].token_ids``, ``prompt_token_ids`` and
  ``logprobs.token_logprobs`` / ``logprobs.tokens``.
- SGLang ``POST /generate`` with ``input_ids``, ``return_logprob`` and
  ``return_text_in_logprobs``: ``output_ids`` and ``meta_info.output_token_logprobs`` as
  ``[logprob, id, text]``, ``meta_info.finish_reason.type``, ``meta_info.weight_version``.
- llama.cpp ``POST /completion`` with ``prompt`` a list of ids, ``n_probs: 1`` and
  ``return_tokens``: ``tokens``, ``completion_probabilities[]`` (``id``, ``token``,
  ``logprob``), ``stop_type`` (``eos``/``word``: stop, ``limit``: length), ``tokens_evaluated``
  and ``timings``.

The prompt ids of a turn are those sent; when the server echoes its own (vLLM's
``prompt_token_ids``) or counts them (llama.cpp's ``tokens_evaluated``, SGLang's
``prompt_tokens``), a disagreement is a fault on the turn. Sampled ids or logprobs the answer
lacks are ``missing`` (asked again, as in chat mode: ``policy.tokens``), not faults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from envfarm.policy.base import SamplingParams
from envfarm.policy.tokens import TokenData, server_timings

GenerateDialect = Literal["vllm", "sglang", "llamacpp"]


@dataclass
class Generated:
    text: str
    finish_reason: str | None
    tokens: TokenData
    usage: dict[str, int] | None = None
    version: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)


def generate_path(dialect: GenerateDialect) -> tuple[str, str]:
    """(``root`` or ``base``, path) of the dialect's token-in endpoint."""
    if dialect == "vllm":
        return "base", "/completions"
    if dialect == "sglang":
        return "root", "/generate"
    return "root", "/completion"


def generate_request(
    dialect: GenerateDialect, model: str, prompt: list[int], sampling: SamplingParams
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The request body and the sampling parameters it sends."""
    sent = sampling.to_request()
    sent.pop("tool_choice", None)  # no tools at this level: the template has them
    if dialect == "vllm":
        body = {"model": model, "prompt": prompt, "logprobs": 1, "return_token_ids": True}
        return {**body, **sent}, sent
    if dialect == "sglang":
        params = {"temperature": sent["temperature"], "top_p": sent["top_p"]}
        if "max_tokens" in sent:
            params["max_new_tokens"] = sent["max_tokens"]
        if "seed" in sent:
            params["sampling_seed"] = sent["seed"]
        body = {
            "input_ids": prompt,
            "sampling_params": params,
            "return_logprob": True,
            "return_text_in_logprobs": True,
        }
        return body, sent
    body = {
        "prompt": prompt,
        "n_predict": sent.get("max_tokens", -1),
        "temperature": sent["temperature"],
        "top_p": sent["top_p"],
        "n_probs": 1,
        "return_tokens": True,
        "cache_prompt": True,
        "stream": False,
    }
    if "seed" in sent:
        body["seed"] = sent["seed"]
    return body, sent


class _Read:
    def __init__(self, dialect: GenerateDialect, data: dict[str, Any], prompt: list[int]) -> None:
        self.dialect, self.data, self.prompt = dialect, data, prompt
        self.faults: list[str] = []
        self.missing: list[str] = []

    def fault(self, message: str) -> None:
        self.faults.append(f"{self.dialect}: {message}")

    def ints(self, value: Any, where: str) -> list[int] | None:
        if value is None:
            self.missing.append(f"{self.dialect}: {where} is missing")
            return None
        if not isinstance(value, list) or not all(type(v) is int for v in value):
            self.fault(f"{where} is not a list of integers")
            return None
        return value

    def floats(self, values: list[Any] | None, where: str) -> list[float] | None:
        if values is None:
            self.missing.append(f"{self.dialect}: {where} is missing")
            return None
        if not all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            for v in values
        ):
            self.fault(f"{where} has an entry that is not a finite number")
            return None
        return [float(v) for v in values]

    def count(self, counted: Any, where: str) -> None:
        if type(counted) is int and counted != len(self.prompt):
            self.fault(f"{len(self.prompt)} prompt ids were sent but {where} is {counted}")

    def tokens(
        self, ids: list[int] | None, logprobs: list[float] | None, texts: list[Any]
    ) -> TokenData:
        if ids is not None and logprobs is not None and len(ids) != len(logprobs):
            self.fault(f"{len(ids)} completion ids but {len(logprobs)} logprobs")
        return TokenData(
            token_source=self.dialect,
            prompt_token_ids=list(self.prompt),
            completion_token_ids=ids,
            logprobs=logprobs,
            completion_tokens=[str(t) for t in texts]
            if all(isinstance(t, str) for t in texts)
            else None,
            request_mode="tokens",
            faults=self.faults,
            missing=self.missing,
        )


def read_generated(dialect: GenerateDialect, data: dict[str, Any], prompt: list[int]) -> Generated:
    """What a 200 answer of ``dialect``'s token-in endpoint says."""
    read = _Read(dialect, data, prompt)
    if dialect == "vllm":
        choices = data.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else {}
        choice = choice if isinstance(choice, dict) else {}
        echoed = choice.get("prompt_token_ids", data.get("prompt_token_ids"))
        if echoed is not None and echoed != prompt:
            read.fault("prompt_token_ids differ from the ids sent")
        ids = read.ints(choice.get("token_ids"), "choices[0].token_ids")
        found = choice.get("logprobs")
        logprobs: dict[str, Any] = found if isinstance(found, dict) else {}
        given = logprobs.get("token_logprobs")
        values = read.floats(None if given is None else list(given), "token_logprobs")
        usage = data.get("usage")
        return Generated(
            text=str(choice.get("text") or ""),
            finish_reason=choice.get("finish_reason"),
            tokens=read.tokens(ids, values, list(logprobs.get("tokens") or [])),
            usage=_ints(usage),
            raw=data,
        )
    if dialect == "sglang":
        meta_raw = data.get("meta_info")
        meta: dict[str, Any] = meta_raw if isinstance(meta_raw, dict) else {}
        given = meta.get("output_token_logprobs")
        triples = given if isinstance(given, list) else []
        if not all(isinstance(t, list) and len(t) >= 2 for t in triples):
            triples = []
            read.fault("meta_info.output_token_logprobs is not [logprob, id, text] entries")
        by_triples = None if given is None else [t[1] for t in triples]
        ids = read.ints(data.get("output_ids", by_triples), "output_ids")
        if triples and ids is not None and [t[1] for t in triples] != ids:
            read.fault("output_ids disagree with meta_info.output_token_logprobs")
        values = read.floats(
            None if given is None else [t[0] for t in triples], "meta_info.output_token_logprobs"
        )
        read.count(meta.get("prompt_tokens"), "meta_info.prompt_tokens")
        finish = meta.get("finish_reason")
        version = meta.get("weight_version")
        return Generated(
            text=str(data.get("text") or ""),
            finish_reason=finish.get("type") if isinstance(finish, dict) else finish,
            tokens=read.tokens(ids, values, [t[2] if len(t) > 2 else None for t in triples]),
            usage=_ints(
                {
                    "prompt_tokens": meta.get("prompt_tokens"),
                    "completion_tokens": meta.get("completion_tokens"),
                }
            ),
            version=str(version) if version is not None else None,
            raw=data,
        )
    given = data.get("completion_probabilities")
    probs = [p for p in given if isinstance(p, dict)] if isinstance(given, list) else []
    ids = read.ints(data.get("tokens"), "tokens")
    by_probs = [p.get("id") for p in probs]
    if ids is not None and given is not None and by_probs != ids:
        read.fault("tokens disagree with completion_probabilities[].id")
    values = read.floats(
        None if given is None else [p.get("logprob") for p in probs],
        "completion_probabilities[].logprob",
    )
    read.count(data.get("tokens_evaluated"), "tokens_evaluated")
    stop = data.get("stop_type")
    finish = "length" if stop == "limit" else "stop" if stop in ("eos", "word") else stop
    tokens = read.tokens(ids, values, [p.get("token") for p in probs])
    tokens.server_timings = server_timings(data)
    predicted = data.get("tokens_predicted")
    return Generated(
        text=str(data.get("content") or ""),
        finish_reason=finish if isinstance(finish, str) else None,
        tokens=tokens,
        usage=_ints(
            {"prompt_tokens": data.get("tokens_evaluated"), "completion_tokens": predicted}
        ),
        raw=data,
    )


def _ints(value: Any) -> dict[str, int] | None:
    if not isinstance(value, dict):
        return None
    out = {k: v for k, v in value.items() if type(v) is int}
    return out or None
