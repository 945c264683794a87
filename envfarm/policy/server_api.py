"""The servers' own APIs beside the OpenAI one: tokenizing and rendering the chat template.

- llama.cpp: ``POST /apply-template`` (the chat body, answered with ``{"prompt": text}``: the
  exact text its chat endpoint would run) and ``POST /tokenize`` (``content``, ``add_special``,
  ``parse_special``; answered with ``{"tokens": [...]}``). The chat endpoint tokenizes its
  prompt with ``add_special`` and ``parse_special`` on, so ``/tokenize`` is asked the same.
- vLLM: ``POST /tokenize`` with ``messages`` (and ``tools``, ``add_generation_prompt``,
  ``add_special_tokens: false``), answered with ``{"tokens": [...]}``.
- Any server, with a tokenizer the user names: the model's Hugging Face tokenizer renders the
  template locally (``transformers``, imported only then).

A ``Renderer`` turns a message list into the ids the model's chat template gives it; token mode
(``policy.token_session``) uses it for the first prompt of a context and for the new messages
appended after each completion.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, Protocol

from envfarm.errors import PolicyConfigError, PolicyError
from envfarm.policy.attempts import (
    RETRYABLE_STATUSES,
    AttemptFailure,
    SideRequestFailed,
    parse_retry_after,
)
from envfarm.policy.base import Completion
from envfarm.policy.rejections import parser_error


class ServerClient(Protocol):
    """What these calls need of an endpoint's client (``OpenAIPolicy`` is one)."""

    model: str

    @property
    def root_url(self) -> str: ...

    async def post_json(self, url: str, payload: Any) -> tuple[int, Mapping[str, str], bytes]: ...


def _json(status: int, headers: Mapping[str, str], body: bytes, what: str) -> Any:
    """The JSON of a 200 answer. A status a retry may fix (503 while a server swaps weights,
    502 from a proxy in front of a restarting one; not a 500 from the server's request parser)
    raises ``SideRequestFailed``, any other ``PolicyError``."""
    if status != 200:
        text = body.decode("utf-8", errors="replace")[:300]
        cause = f"{what} answered HTTP {status}: {text}"
        if status in RETRYABLE_STATUSES and not parser_error(status, body):
            retry_after = parse_retry_after(headers.get("Retry-After"))
            raise SideRequestFailed(AttemptFailure(cause, status=status, retry_after=retry_after))
        raise PolicyError(cause)
    try:
        return json.loads(body)
    except ValueError:
        raise PolicyError(f"{what} answered HTTP 200 with a body that is not JSON") from None


async def llamacpp_tokenize(client: ServerClient, text: str, *, special: bool) -> list[int]:
    """llama.cpp's ids of ``text``; ``special``: add BOS as its prompts do."""
    url = f"{client.root_url}/tokenize"
    payload = {"content": text, "add_special": special, "parse_special": True}
    status, headers, body = await client.post_json(url, payload)
    data = _json(status, headers, body, f"POST {url}")
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
        raise PolicyError(f"POST {url} answered without a list of integer `tokens`")
    return tokens


async def llamacpp_template(client: ServerClient, payload: dict[str, Any]) -> str:
    url = f"{client.root_url}/apply-template"
    status, headers, body = await client.post_json(url, payload)
    data = _json(status, headers, body, f"POST {url}")
    prompt = data.get("prompt") if isinstance(data, dict) else None
    if not isinstance(prompt, str):
        raise PolicyError(f"POST {url} answered without a string `prompt`")
    return prompt


async def llamacpp_prompt_ids(client: ServerClient, encoded: bytes, completion: Completion) -> None:
    """Fill ``completion.tokens.prompt_token_ids`` with llama.cpp's own tokenization of the
    prompt its chat endpoint ran for ``encoded``; a failure leaves them missing, a count that
    disagrees with ``usage.prompt_tokens`` is a fault on the turn."""
    tokens = completion.tokens
    if tokens is None:
        return
    try:
        prompt = await llamacpp_template(client, json.loads(encoded))
        ids = await llamacpp_tokenize(client, prompt, special=True)
    except PolicyError as exc:
        tokens.missing.append(f"llamacpp: the prompt ids could not be read: {exc}")
        return
    counted = (completion.usage or {}).get("prompt_tokens")
    if counted is not None and counted != len(ids):
        tokens.faults.append(
            f"llamacpp: /tokenize gave {len(ids)} prompt ids but the answer counted "
            f"{counted} prompt tokens"
        )
    tokens.prompt_token_ids = ids


class Renderer(ABC):
    """Renders messages through the model's chat template into token ids."""

    name: str

    @abstractmethod
    async def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, generation: bool
    ) -> list[int]:
        """The ids of ``messages`` (with ``tools``), followed by the generation prompt when
        ``generation``."""

    async def tokenize(self, text: str) -> list[int]:
        """The ids of ``text`` alone (special tokens parsed, none added)."""
        raise NotImplementedError


class LlamaCppRenderer(Renderer):
    name = "llama.cpp /apply-template + /tokenize"

    def __init__(self, client: ServerClient) -> None:
        self.client = client

    async def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, generation: bool
    ) -> list[int]:
        payload: dict[str, Any] = {"messages": messages, "add_generation_prompt": generation}
        if tools:
            payload["tools"] = tools
        text = await llamacpp_template(self.client, payload)
        return await llamacpp_tokenize(self.client, text, special=True)

    async def tokenize(self, text: str) -> list[int]:
        return await llamacpp_tokenize(self.client, text, special=False)


class VLLMRenderer(Renderer):
    name = "vLLM /tokenize"

    def __init__(self, client: ServerClient) -> None:
        self.client = client

    async def _tokens(self, payload: dict[str, Any]) -> list[int]:
        url = f"{self.client.root_url}/tokenize"
        payload = {"model": self.client.model, **payload}
        status, headers, body = await self.client.post_json(url, payload)
        data = _json(status, headers, body, f"POST {url}")
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
            raise PolicyError(f"POST {url} answered without a list of integer `tokens`")
        return tokens

    async def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, generation: bool
    ) -> list[int]:
        payload: dict[str, Any] = {
            "messages": messages,
            "add_generation_prompt": generation,
            "add_special_tokens": False,
        }
        if tools:
            payload["tools"] = tools
        return await self._tokens(payload)

    async def tokenize(self, text: str) -> list[int]:
        return await self._tokens({"prompt": text, "add_special_tokens": False})


class TokenizerRenderer(Renderer):
    """A Hugging Face tokenizer the user named (a hub id or a local directory)."""

    def __init__(self, name_or_path: str) -> None:
        try:
            from transformers import AutoTokenizer
        except ImportError as exc:
            raise PolicyConfigError(
                f"--tokenizer {name_or_path!r} needs the `transformers` package "
                "(pip install transformers), or leave it out to render through the server"
            ) from exc
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        except Exception as exc:  # foreign library: translated once, here
            raise PolicyConfigError(f"cannot load tokenizer {name_or_path!r}: {exc}") from exc
        self.name = f"tokenizer {name_or_path}"

    async def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, generation: bool
    ) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=generation, tokenize=True
        )
        return [int(i) for i in ids]

    async def tokenize(self, text: str) -> list[int]:
        return [int(i) for i in self.tokenizer.encode(text, add_special_tokens=False)]
