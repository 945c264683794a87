"""Client for OpenAI-compatible chat completions with tools (vLLM, SGLang, Fireworks, ...).

Failures fall in three classes, decided once here:

- transient (HTTP 408, 429, 500, 502, 503, 504, connection errors, timeouts): retried with
  exponential backoff and full jitter, or after ``Retry-After`` when the server sends one
  (capped at ``backoff_max_s``); when retries run out, ``PolicyError`` (infrastructure);
- configuration (bad URL, rejected API key, wrong route, unknown model): ``PolicyConfigError``
  at once, since retrying cannot help;
- unusable answers (other 4xx, a 200 that is not a completion): ``PolicyResponseError``.

The API key is sent as a bearer token and scrubbed from every message this module produces.
"""

from __future__ import annotations

import asyncio
import email.utils
import io
import json
import logging
import random
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from envfarm.errors import PolicyConfigError, PolicyError, PolicyResponseError
from envfarm.policy.base import (
    EXCERPT_CHARS,
    Completion,
    PolicyClient,
    RetryRecord,
    SamplingParams,
    parse_completion,
)

log = logging.getLogger(__name__)

RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_JSON = {"Content-Type": "application/json"}
_MODEL_MISSING = re.compile(
    r"model.*(does not exist|doesn't exist|not found|not exist)|(unknown|no such|invalid) model",
    re.IGNORECASE | re.DOTALL,
)


def normalize_base_url(base_url: str) -> str:
    """``http(s)://host[:port][/path]`` without trailing slash, or PolicyConfigError."""
    expected = "expected an http(s) URL such as http://127.0.0.1:8000/v1"
    try:
        parts = urlsplit(base_url.strip())
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError as exc:
        raise PolicyConfigError(f"invalid policy base URL {base_url!r}: {exc}; {expected}") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PolicyConfigError(f"invalid policy base URL {base_url!r}: {expected}")
    if parts.query or parts.fragment:
        raise PolicyConfigError(f"policy base URL {base_url!r} must not have a query or fragment")
    return base_url.strip().rstrip("/")


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date)."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


class OpenAIPolicy(PolicyClient):
    """``POST {base_url}/chat/completions``; one shared aiohttp session, created lazily.

    ``extra_body`` is merged into every request (server extensions such as vLLM's
    ``return_token_ids`` or ``logprobs``); the whole response is kept in ``Completion.raw``.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        max_retries: int = 5,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
        request_timeout_s: float = 600.0,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        self.base_url = normalize_base_url(base_url)
        self.url = f"{self.base_url}/chat/completions"
        if not model:
            raise PolicyConfigError(f"no model name given for the policy endpoint {self.base_url}")
        if max_retries < 0 or backoff_base_s < 0 or backoff_max_s < 0 or request_timeout_s <= 0:
            raise PolicyConfigError(
                "policy client limits must be non-negative (and the request timeout positive)"
            )
        self.model = model
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.request_timeout_s = request_timeout_s
        self.extra_body = dict(extra_body or {})
        self._api_key = api_key or None
        self._session: aiohttp.ClientSession | None = None
        self._random = random.Random()

    def __repr__(self) -> str:
        return f"OpenAIPolicy(base_url={self.base_url!r}, model={self.model!r})"

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        sampling: SamplingParams,
    ) -> Completion:
        sent = sampling.to_request()
        payload: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            payload["tools"] = [_as_openai_tool(t) for t in tools]
        payload.update(self.extra_body)
        payload.update(sent)
        encoded = json.dumps(payload).encode()
        retries: list[RetryRecord] = []
        attempt = 0
        while True:
            started = time.monotonic()
            failure: BaseException | None = None
            try:
                status, headers, body = await self._post(encoded)
            except aiohttp.ClientSSLError as exc:
                raise PolicyConfigError(f"TLS failed for {self.url}: {exc}") from exc
            except (aiohttp.ClientError, TimeoutError) as exc:
                failure = exc
                cause = _describe(exc, self.request_timeout_s)
                retry_after = None
            else:
                if status == 200:
                    return parse_completion(
                        body,
                        url=self.url,
                        endpoint=self.base_url,
                        model=self.model,
                        sampling=sent,
                        latency_s=time.monotonic() - started,
                        attempts=attempt + 1,
                        retries=retries,
                        scrub=self._scrub,
                    )
                if status not in RETRYABLE_STATUSES:
                    raise self._rejected(status, body)
                cause = f"HTTP {status}: {self._excerpt(body)}"
                retry_after = parse_retry_after(headers.get("Retry-After"))
            if attempt == self.max_retries:
                raise PolicyError(
                    f"policy endpoint {self.url} failed after {attempt + 1} attempts; "
                    f"last error: {cause}"
                ) from failure
            delay = self._delay(attempt, retry_after)
            retries.append(RetryRecord(cause=cause, delay_s=delay))
            log.warning(
                "policy request to %s failed (%s); retrying in %.2fs", self.url, cause, delay
            )
            await asyncio.sleep(delay)
            attempt += 1

    async def aclose(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def _post(self, body: bytes) -> tuple[int, Mapping[str, str], bytes]:
        # A stream, not bytes: aiohttp warns that large byte bodies (long histories) can block
        # the event loop while sending.
        data = io.BytesIO(body)
        async with self._get_session().post(self.url, data=data, headers=_JSON) as response:
            return response.status, response.headers, await response.read()

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            headers = {"Accept": "application/json"}
            if self._api_key:
                headers["Authorization"] = f"Bearer {self._api_key}"
            self._session = aiohttp.ClientSession(
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.request_timeout_s),
                connector=aiohttp.TCPConnector(limit=0),
            )
        return self._session

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.backoff_max_s)
        ceiling = min(self.backoff_max_s, self.backoff_base_s * 2**attempt)
        return self._random.uniform(0, ceiling)

    def _rejected(self, status: int, body: bytes) -> PolicyError:
        said = self._excerpt(body)
        if status in (401, 403):
            hint = "check the API key" if self._api_key else "no API key was given"
            return PolicyConfigError(
                f"policy endpoint {self.url} refused the request with HTTP {status} ({hint}): "
                f"{said}"
            )
        if status in (400, 404) and _says_model_missing(body):
            return PolicyConfigError(
                f"policy endpoint {self.base_url} does not serve model {self.model!r} "
                f"(HTTP {status}): {said}"
            )
        if status == 404:
            return PolicyConfigError(
                f"POST {self.url} returned HTTP 404: is this an OpenAI-compatible /v1 base URL? "
                f"(base URL given: {self.base_url})"
            )
        return PolicyResponseError(
            f"policy endpoint {self.url} rejected the request with HTTP {status}: {said}",
            status=status,
        )

    def _scrub(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text

    def _excerpt(self, body: bytes) -> str:
        text = body.decode("utf-8", errors="replace").strip()
        if len(text) > EXCERPT_CHARS:
            text = text[:EXCERPT_CHARS] + f"... ({len(body)} bytes)"
        return self._scrub(text) or "(empty body)"


def _as_openai_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """Accept both ``{"type": "function", "function": {...}}`` and a bare function spec."""
    return tool if "type" in tool else {"type": "function", "function": tool}


def _says_model_missing(body: bytes) -> bool:
    try:
        data = json.loads(body)
    except ValueError:
        return bool(_MODEL_MISSING.search(body.decode("utf-8", errors="replace")))
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, dict):
        if error.get("code") == "model_not_found":
            return True
        error = error.get("message", error.get("detail", ""))
    return bool(_MODEL_MISSING.search(str(error)))


def _describe(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"no complete answer within {timeout_s:g}s"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
