"""Server profiles: which token-capture fields a request carries and how the answer is read.

- ``vllm``: ``logprobs: true, top_logprobs: 0, return_token_ids: true``. Routed experts come
  back when the server runs with ``--enable-return-routed-experts`` (there is no per-request
  switch).
- ``sglang``: ``logprobs: true, return_prompt_token_ids: true, return_token_ids: true,
  return_meta_info: true``, plus ``return_routed_experts: true`` when routed experts are asked
  for (the server needs ``--enable-return-routed-experts``).
- ``llamacpp``: ``logprobs: true, top_logprobs: 1`` (llama.cpp returns no logprobs at all for
  ``top_logprobs: 0``); the sampled ids come from ``logprobs.content[].id``, the prompt ids
  from the server tokenizing the prompt it ran (``/apply-template``, ``/tokenize``), and its
  ``timings`` are kept per turn.
- ``openai``: nothing extra; the server gives text only and every turn says so
  (``token_source: "none"``).
- ``auto`` (the CLI's default): before the first request the server's own API is probed
  (``GET /props``: llama.cpp; ``GET /get_server_info``: SGLang; ``GET /version``: vLLM), once
  per endpoint, and the profile and the reason are recorded on every turn. No request goes out
  before the probe has settled: concurrent first requests wait for it (``TokenCapture.probe``).
  When no probe answers, the union of the vLLM and SGLang fields goes out until the first
  answer, whose fields decide the profile. A server that refuses the unknown fields with HTTP
  400 is taken as ``openai`` and the request is sent again without them.

Each turn is stamped with the policy version that produced it: the response's own version
(SGLang's ``weight_version``, the last of its ``weight_versions`` spans), else a response
header (``X-Policy-Version`` by default), else the latest version the trainer published.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, cast, get_args

from pydantic import BaseModel, ConfigDict

from envfarm.policy.tokens import Dialect, TokenData, read_tokens

ServerProfile = Literal["auto", "vllm", "sglang", "llamacpp", "openai"]
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
LLAMACPP_FIELDS: dict[str, Any] = {"logprobs": True, "top_logprobs": 1}
TOKEN_PROFILES = ("vllm", "sglang", "llamacpp")
"""Profiles whose servers take a prompt of token ids (token mode)."""
CAPTURE_FIELDS = frozenset(
    {**VLLM_FIELDS, **SGLANG_FIELDS, **SGLANG_ROUTED_FIELDS, **LLAMACPP_FIELDS}
)
"""Every request field some profile adds."""


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
    if profile == "llamacpp":
        return dict(LLAMACPP_FIELDS)
    if profile == "auto":
        return {**VLLM_FIELDS, **sglang}
    return {}


def detect_profile(body: Mapping[str, Any]) -> Literal["vllm", "sglang", "llamacpp", "openai"]:
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
    if isinstance(body.get("timings"), dict):
        return "llamacpp"
    return "openai"


Probe = Callable[[str], Awaitable[Any]]
"""``GET`` a path at the server's root: the JSON body of a 200 answer, else None."""


async def probe_profile(get: Probe) -> tuple[ServerProfile, str]:
    """The profile the server's own API says it speaks, and why; ``auto`` when none answers."""
    props = await get("/props")
    if isinstance(props, dict) and (
        "default_generation_settings" in props or "chat_template" in props
    ):
        build = props.get("build_info")
        built = f" (build {build})" if isinstance(build, str) and build else ""
        return "llamacpp", f"auto: GET /props answered as llama.cpp's server does{built}"
    info = await get("/get_server_info")
    if isinstance(info, dict) and ("version" in info or "model_path" in info):
        return (
            "sglang",
            f"auto: GET /get_server_info answered as SGLang does ({info.get('version')})",
        )
    version = await get("/version")
    if isinstance(version, dict) and isinstance(version.get("version"), str):
        return "vllm", f"auto: GET /version answered as vLLM does ({version['version']})"
    return "auto", "auto: no server API answered the probe; detected from the first answer"


class TokenCapture:
    """One endpoint's token capture: request fields, auto-detection, reading, version stamps."""

    def __init__(
        self,
        options: CaptureOptions | None = None,
        version_source: Callable[[], str | None] | None = None,
    ) -> None:
        self.options = options or CaptureOptions()
        self.profile: ServerProfile = self.options.profile
        """The profile in use; ``auto`` until the probe or the first answer settles it."""
        self.reason = "given" if self.profile != "auto" else "auto: not probed yet"
        """Why ``profile``: given by the user, or what auto-detection found."""
        self.probed = self.profile != "auto"
        """True once the profile is settled: given, or the probe has answered (or failed)."""
        self.version_source = version_source
        self._probing = asyncio.Lock()

    async def probe(self, get: Probe) -> None:
        """Settle an ``auto`` profile from the server's own API (``probe_profile``), once.

        Every caller returns only once the probe has settled the profile, so concurrent first
        requests all wait for the one probe and then carry its profile's fields: one sent
        before the answer would carry the fallback fields, which llama.cpp answers without
        logprobs. The probe runs under a lock held by the caller that started it, not as a
        task of its own: a caller cancelled mid-probe releases the lock and the next waiter
        probes in its place, so nobody waits on a probe nobody runs, and nothing outlives the
        callers. A probe that finds nothing settles the fallback (``auto``) for everyone, with
        its reason.
        """
        if self.probed:
            return
        async with self._probing:
            if self.probed:
                return
            self.profile, self.reason = await probe_profile(get)
            self.probed = True

    def request_fields(self) -> dict[str, Any]:
        return request_fields(self.profile, routed_experts=self.options.routed_experts)

    def refused(self, status: int, body: bytes) -> bool:
        """True when an ``auto`` request was rejected for carrying extension fields (never
        once the answers showed a vLLM or SGLang server: its 400s are about something else)."""
        if self.options.profile != "auto" or self.profile in TOKEN_PROFILES:
            return False
        if status not in (400, 422):
            return False
        text = body.decode("utf-8", errors="replace")
        return any(name in text for name in request_fields("auto", routed_experts=True))

    def without_fields(self, encoded: bytes) -> bytes:
        """Settle on ``openai`` and return the request body without the extension fields."""
        self.profile = "openai"
        self.reason = "auto: the server refused the token-capture fields with HTTP 400"
        payload = json.loads(encoded)
        for name in request_fields("auto", routed_experts=True):
            payload.pop(name, None)
        return json.dumps(payload).encode()

    def with_fields(self, encoded: bytes, *after: Mapping[str, Any]) -> bytes:
        """The request body ``encoded`` with the profile's fields in place of those it was sent
        with (to ask again for token data an answer lacked); ``after`` (the user's extra body,
        the sampling) is applied after them, as when it was encoded."""
        payload = {k: v for k, v in json.loads(encoded).items() if k not in CAPTURE_FIELDS}
        payload.update(self.request_fields())
        for fields in after:
            payload.update(fields)
        return json.dumps(payload).encode()

    def read(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> TokenData:
        """The token data of a 200 response (its JSON ``body`` and its ``headers``)."""
        if self.profile == "auto":
            self.profile = detect_profile(body)
            self.reason = f"auto: the first answer's fields are {self.profile}'s"
        if self.profile in TOKEN_PROFILES:
            dialect: Dialect = cast(Dialect, self.profile)
            data = read_tokens(dict(body), dialect)
        else:
            data = TokenData()
        data.server_profile, data.server_profile_reason = self.profile, self.reason
        data.request_mode = "chat"
        if data.policy_version is None:
            self.stamp(data, headers)
        return data

    def stamp(self, data: TokenData, headers: Mapping[str, str]) -> None:
        name = self.options.version_header
        header = headers.get(name) if name else None
        if header:
            data.policy_version, data.policy_version_source = header.strip(), "header"
            return
        published = self.version_source() if self.version_source else None
        if published is not None:
            data.policy_version, data.policy_version_source = published, "published"
