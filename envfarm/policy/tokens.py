"""Reading exact token data out of vLLM and SGLang chat-completion responses.

What each server returns (non-streaming ``/v1/chat/completions``, choice 0):

- vLLM, asked for ``return_token_ids`` and ``logprobs``: ``prompt_token_ids`` at the response
  root, ``choices[].token_ids``, ``choices[].logprobs.content[i].logprob``; with
  ``--enable-return-routed-experts``, ``choices[].routed_experts``: nested lists
  ``[tokens - 1][layers][top_k]`` (earlier releases) or a base64 ``.npy`` file (later ones).
- SGLang, asked for ``return_prompt_token_ids``, ``return_meta_info`` and ``logprobs``:
  ``choices[].prompt_token_ids``, ``choices[].meta_info.output_token_logprobs`` as
  ``[logprob, token_id, text]`` triples, ``choices[].token_ids`` on releases that have
  ``return_token_ids``; the weight version in ``meta_info.weight_version`` (and the root's
  ``metadata.weight_version``), per-token version spans in ``meta_info.weight_versions``;
  routed experts (``return_routed_experts``) as base64 int32 in ``meta_info.routed_experts``
  and the root's ``sglext.routed_experts``.
- llama.cpp, asked for ``logprobs: true`` with ``top_logprobs`` of at least 1 (with
  ``top_logprobs: 0`` it returns no logprobs at all): ``choices[].logprobs.content[]`` with each
  sampled token's ``id``, ``token``, ``bytes`` and ``logprob``, and ``timings`` at the root. It
  returns no prompt ids: the client asks the server to tokenize exactly the prompt it ran
  (``/apply-template`` then ``/tokenize``) and checks the count against ``usage.prompt_tokens``.

Nothing is re-tokenized and nothing is silently repaired. Two kinds of problem are told apart:

- token data that is *absent* (a field the profile asks for is not in the answer: the server
  was not asked for it, or did not honour the request) is listed in ``TokenData.missing``: the
  client asks again once, and if the answer still lacks it, the turn is kept without token data
  (``token_source: "none"`` and the reason; ``TokenData.without_data``);
- token data that is present but inconsistent (ids and logprobs of different lengths, a value
  that is not a number, a malformed routing array) becomes a *fault* on the turn, with the data
  kept as received, and the episode is not trained on.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from envfarm.models.trajectory import (
    RequestMode,
    RoutedExperts,
    TokenSource,
    VersionSource,
    VersionSpan,
)
from envfarm.policy.routing import decode_base64, from_nested, from_npy

Dialect = Literal["vllm", "sglang", "llamacpp"]


class TokenData(BaseModel):
    """The token-level record of one model call, ready to become ``Turn`` fields."""

    model_config = ConfigDict(extra="forbid")

    token_source: TokenSource = "none"
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    routed_experts: RoutedExperts | None = None
    policy_version: str | None = None
    policy_version_source: VersionSource | None = None
    policy_version_spans: list[VersionSpan] | None = None
    completion_tokens: list[str] | None = None
    completion_text: str | None = None
    request_mode: RequestMode | None = None
    server_profile: str | None = None
    server_profile_reason: str | None = None
    server_timings: dict[str, float] | None = None
    faults: list[str] = Field(default_factory=list)
    token_reask: str | None = None
    token_source_reason: str | None = None
    missing: list[str] = Field(default_factory=list)
    """What of the token data the profile asks for the answer lacked (absent, not inconsistent);
    not a turn field: the client asks again, then keeps the turn ``without_data``."""

    def turn_fields(self) -> dict[str, Any]:
        return {name: value for name, value in self if name != "missing"}

    @property
    def lacking(self) -> bool:
        """Absent token data and no fault: worth asking again (a fault stands as it is)."""
        return bool(self.missing) and not self.faults

    def without_data(self, reason: str) -> TokenData:
        """This record with no token data (``token_source: "none"``, and why): what a turn keeps
        when its answers lacked the token data even when asked again."""
        return self.model_copy(
            update={
                "token_source": "none",
                "prompt_token_ids": None,
                "completion_token_ids": None,
                "logprobs": None,
                "routed_experts": None,
                "completion_tokens": None,
                "policy_version_spans": None,
                "missing": [],
                "token_source_reason": reason,
            }
        )


def read_tokens(body: dict[str, Any], dialect: Dialect) -> TokenData:
    """The token data of ``choices[0]`` of a parsed 200 response in ``dialect``."""
    choices = body.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(choice, dict):
        return TokenData(token_source=dialect, faults=["the response has no choices[0]"])
    readers: dict[str, type[_Reader]] = {
        "vllm": _VLLMReader,
        "sglang": _SGLangReader,
        "llamacpp": _LlamaCppReader,
    }
    data = readers[dialect](body, choice).read()
    data.server_timings = server_timings(body)
    return data


def server_timings(body: dict[str, Any]) -> dict[str, float] | None:
    """llama.cpp's ``timings`` object (numbers only), or None."""
    timings = body.get("timings")
    if not isinstance(timings, dict):
        return None
    return {
        k: float(v)
        for k, v in timings.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


class _Reader:
    source: Dialect

    def __init__(self, body: dict[str, Any], choice: dict[str, Any]) -> None:
        self.body, self.choice = body, choice
        self.faults: list[str] = []
        self.missing: list[str] = []
        self.texts: list[str] | None = None
        """Each completion token's text, when the answer carries it."""

    def fault(self, message: str) -> None:
        self.faults.append(f"{self.source}: {message}")

    def lack(self, message: str) -> None:
        self.missing.append(f"{self.source}: {message}")

    def int_list(self, value: Any, where: str) -> list[int] | None:
        if value is None:
            self.lack(f"{where} is missing")
            return None
        if not isinstance(value, list) or not all(type(v) is int for v in value):
            self.fault(f"{where} is not a list of integers")
            return None
        return value

    def read(self) -> TokenData:
        raise NotImplementedError

    def finish(
        self,
        prompt: list[int] | None,
        ids: list[int] | None,
        logprobs: list[float] | None,
        routed: RoutedExperts | None,
    ) -> TokenData:
        if ids is not None and logprobs is not None and len(ids) != len(logprobs):
            self.fault(
                f"{len(ids)} completion token ids but {len(logprobs)} logprobs: the token data "
                "cannot be aligned and is kept as received"
            )
        return TokenData(
            token_source=self.source,
            prompt_token_ids=prompt,
            completion_token_ids=ids,
            logprobs=logprobs,
            routed_experts=routed,
            completion_tokens=self.texts if ids is not None else None,
            faults=self.faults,
            missing=self.missing,
        )

    def content_logprobs(self, ids: list[int] | None) -> list[float] | None:
        logprobs = self.choice.get("logprobs")
        content = logprobs.get("content") if isinstance(logprobs, dict) else None
        if content is None and ids == [] and logprobs is not None:
            return []
        if content is None:
            self.lack("choices[0].logprobs.content is missing (was logprobs requested?)")
            return None
        if not isinstance(content, list):
            self.fault("choices[0].logprobs.content is not a list")
            return None
        values = [item.get("logprob") if isinstance(item, dict) else None for item in content]
        texts = [item.get("token") if isinstance(item, dict) else None for item in content]
        if all(isinstance(t, str) for t in texts):
            self.texts = [str(t) for t in texts]
        return self.floats(values, "choices[0].logprobs.content[].logprob")

    def floats(self, values: list[Any], where: str) -> list[float] | None:
        out: list[float] = []
        for index, value in enumerate(values):
            if isinstance(value, bool) or not isinstance(value, int | float):
                self.fault(f"{where} at position {index} is not a number: {value!r}")
                return None
            if not math.isfinite(value):
                self.fault(f"{where} at position {index} is not finite: {value!r}")
                return None
            out.append(float(value))
        return out


class _VLLMReader(_Reader):
    source: Dialect = "vllm"

    def read(self) -> TokenData:
        if self.body.get("prompt_token_ids") is None:
            self.lack(
                "prompt_token_ids is missing at the response root: the server did not honour "
                "return_token_ids (it needs vLLM 0.10.2 or later)"
            )
            prompt = None
        else:
            prompt = self.int_list(self.body["prompt_token_ids"], "prompt_token_ids")
        ids = self.int_list(self.choice.get("token_ids"), "choices[0].token_ids")
        logprobs = self.content_logprobs(ids)
        return self.finish(prompt, ids, logprobs, self.routed(self.choice.get("routed_experts")))

    def routed(self, value: Any) -> RoutedExperts | None:
        if value is None:
            return None
        if isinstance(value, str):
            return from_npy(value, self.fault)
        if isinstance(value, list):
            return from_nested(value, self.fault)
        self.fault("choices[0].routed_experts is neither nested lists nor a base64 string")
        return None


class _SGLangReader(_Reader):
    source: Dialect = "sglang"

    def read(self) -> TokenData:
        meta = self.choice.get("meta_info")
        meta = meta if isinstance(meta, dict) else {}
        prompt = self.int_list(self.choice.get("prompt_token_ids"), "choices[0].prompt_token_ids")
        explicit = self.choice.get("token_ids")
        triples = meta.get("output_token_logprobs")
        ids: list[int] | None
        logprobs: list[float] | None
        if isinstance(triples, list):
            ids, logprobs = self.triples(triples)
            if explicit is not None and ids is not None and explicit != ids:
                self.fault(
                    "choices[0].token_ids disagrees with meta_info.output_token_logprobs ids"
                )
                ids = self.int_list(explicit, "choices[0].token_ids")
        else:
            ids = self.int_list(explicit, "choices[0].token_ids")
            logprobs = self.content_logprobs(ids)
        sglext = self.body.get("sglext")
        routed = meta.get("routed_experts")
        if routed is None and isinstance(sglext, dict):
            routed = sglext.get("routed_experts")
        data = self.finish(prompt, ids, logprobs, self.routed(routed))
        self.version(data, meta)
        return data

    def triples(self, triples: list[Any]) -> tuple[list[int] | None, list[float] | None]:
        where = "meta_info.output_token_logprobs"
        if not all(isinstance(t, list) and len(t) >= 2 and type(t[1]) is int for t in triples):
            self.fault(f"{where} is not a list of [logprob, token_id, text] entries")
            return None, None
        texts = [t[2] if len(t) > 2 else None for t in triples]
        if all(isinstance(t, str) for t in texts):
            self.texts = [str(t) for t in texts]
        return [t[1] for t in triples], self.floats([t[0] for t in triples], where)

    def routed(self, value: Any) -> RoutedExperts | None:
        if value is None:
            return None
        if not isinstance(value, str):
            self.fault("routed_experts is not a base64 string")
            return None
        raw = decode_base64(value, self.fault)
        if raw is None:
            return None
        if len(raw) % 4:
            self.fault(f"routed_experts has {len(raw)} bytes, not a whole number of int32")
            return None
        return RoutedExperts(shape=[len(raw) // 4], dtype="int32", data=value)

    def version(self, data: TokenData, meta: dict[str, Any]) -> None:
        metadata = self.body.get("metadata")
        version = meta.get("weight_version")
        if version is None and isinstance(metadata, dict):
            version = metadata.get("weight_version")
        spans = meta.get("weight_versions")
        if spans is not None:
            try:
                data.policy_version_spans = [
                    VersionSpan(version=str(s["version"]), start=s["start"], end=s["end"])
                    for s in spans
                ]
            except (KeyError, TypeError, ValueError):
                data.faults.append(
                    "sglang: meta_info.weight_versions is not [{version, start, end}]"
                )
            else:
                if data.policy_version_spans:
                    version = data.policy_version_spans[-1].version
        if version is not None:
            data.policy_version, data.policy_version_source = str(version), "response"


class _LlamaCppReader(_Reader):
    source: Dialect = "llamacpp"

    def read(self) -> TokenData:
        logprobs = self.choice.get("logprobs")
        content = logprobs.get("content") if isinstance(logprobs, dict) else None
        if content is None:
            self.lack(
                "choices[0].logprobs.content is missing: llama.cpp returns it only for "
                "logprobs: true with top_logprobs of at least 1"
            )
            return self.finish(None, None, None, None)
        if not isinstance(content, list):
            self.fault("choices[0].logprobs.content is not a list")
            return self.finish(None, None, None, None)
        ids = self.int_list(
            [item.get("id") if isinstance(item, dict) else None for item in content],
            "choices[0].logprobs.content[].id",
        )
        return self.finish(None, ids, self.content_logprobs(ids), None)
