"""Server profiles: which token-capture fields a request carries and how the answer is read.

- ``vllm``: ``logprobs: true, top_logprobs: 0, return_token_ids: true``. Routed experts come
  back when the server runs with ``--enable-return-routed-experts`` (there is no per-request
  switch).
- ``sglang``: ``logprobs: true, return_prompt_token_ids: true, return_token_ids: true,
  return_meta_info: true``, plus ``return_routed_experts: true`` when routed experts are asked
  for (the server needs ``--enable-return-routed-experts``).
- ``openai``: nothing extra; the server gives text only and every turn says so
  (``token_source: "none"``).
- ``auto`` (the CLI's default): the union of the vLLM and SGLang fields until the first
  answer, whose fields decide the profile from then on. A server that refuses the unknown
  fields with HTTP 400 is taken as ``openai`` and the request is sent again without them.

Each turn is stamped with the policy version that produced it: the response's own version
(SGLang's ``weight_version``, the last of its ``weight_versions`` spans), else a response
header (``X-Policy-Version`` by default), else the latest version the trainer published.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict

from envfarm.policy.tokens import Dialect, TokenData, read_tokens

ServerProfile = Literal["auto", "vllm", "sglang", "openai"]
SERVER_PROFILES: tuple[str, ...] = get_args(ServerProfile)
DEFAULT_VERSION_HEADER = "X-Policy-Version"

VLLM_FIELDS: dict[str, Any] = {"logprobs": True, "top_logprobs": 0, "return_token_ids": True}
SGLANG_FIELDS: dict[str, Any] = {
    "logprobs": True,
    "return_prompt_token_ids": True,
    "return_token_ids": True,
    "return_meta_info": True,
}
SGLANG_ROUTED_FIELDS: dict[str, Any] = {"return_routed_experts": True}


class CaptureOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    profile: ServerProfile = "openai"
    routed_experts: bool = False
    """Ask SGLang for routed experts (vLLM returns them whenever its server flag is on)."""
    version_header: str | None = DEFAULT_VERSION_HEADER
    """Response header carrying the policy version; None to ignore headers."""


def request_fields(profile: ServerProfile, *, routed_experts: bool = False) -> dict[str, Any]:
    """The extension fields a request to a server of ``profile`` carries."""
    sglang = {**SGLANG_FIELDS, **(SGLANG_ROUTED_FIELDS if routed_experts else {})}
    if profile == "vllm":
        return dict(VLLM_FIELDS)
    if profile == "sglang":
        return sglang
    if profile == "auto":
        return {**VLLM_FIELDS, **sglang}
    return {}


def detect_profile(body: Mapping[str, Any]) -> Literal["vllm", "sglang", "openai"]:
    """The dialect a response body speaks, from the extension fields it carries."""
    choices = body.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    choice = choice if isinstance(choice, dict) else {}
    metadata = body.get("metadata")
    if (
        isinstance(choice.get("meta_info"), dict)
        or "sglext" in body
        or (isinstance(metadata, dict) and "weight_version" in metadata)
        or "prompt_token_ids" in choice
    ):
        return "sglang"
    if "prompt_token_ids" in body or "token_ids" in choice:
        return "vllm"
    return "openai"


class TokenCapture:
    """One endpoint's token capture: request fields, auto-detection, reading, version stamps."""

    def __init__(
        self,
        options: CaptureOptions | None = None,
        version_source: Callable[[], str | None] | None = None,
    ) -> None:
        self.options = options or CaptureOptions()
        self.profile: ServerProfile = self.options.profile
        """The profile in use; ``auto`` until the first answer settles it."""
        self.version_source = version_source

    def request_fields(self) -> dict[str, Any]:
        return request_fields(self.profile, routed_experts=self.options.routed_experts)

    def refused(self, status: int, body: bytes) -> bool:
        """True when an ``auto`` request was rejected for carrying extension fields (never
        once the answers showed a vLLM or SGLang server: its 400s are about something else)."""
        if self.options.profile != "auto" or self.profile in ("vllm", "sglang"):
            return False
        if status not in (400, 422):
            return False
        text = body.decode("utf-8", errors="replace")
        return any(name in text for name in request_fields("auto", routed_experts=True))

    def without_fields(self, encoded: bytes) -> bytes:
        """Settle on ``openai`` and return the request body without the extension fields."""
        self.profile = "openai"
        payload = json.loads(encoded)
        for name in request_fields("auto", routed_experts=True):
            payload.pop(name, None)
        return json.dumps(payload).encode()

    def read(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> TokenData:
        """The token data of a 200 response (its JSON ``body`` and its ``headers``)."""
        if self.profile == "auto":
            self.profile = detect_profile(body)
        if self.profile in ("vllm", "sglang"):
            dialect: Dialect = "vllm" if self.profile == "vllm" else "sglang"
            data = read_tokens(dict(body), dialect)
        else:
            data = TokenData()
        if data.policy_version is None:
            self._stamp(data, headers)
        return data

    def _stamp(self, data: TokenData, headers: Mapping[str, str]) -> None:
        name = self.options.version_header
        header = headers.get(name) if name else None
        if header:
            data.policy_version, data.policy_version_source = header.strip(), "header"
            return
        published = self.version_source() if self.version_source else None
        if published is not None:
            data.policy_version, data.policy_version_source = published, "published"
