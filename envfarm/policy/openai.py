"""Client for OpenAI-compatible chat completions with tools (vLLM, SGLang, Fireworks, ...).

Failures fall in three classes, decided once here:

- transient (HTTP 408, 429, 500, 502, 503, 504, connection errors, timeouts): retried with
  exponential backoff and full jitter, or after ``Retry-After`` when the server sends one
  (capped at ``backoff_max_s``); when retries run out, ``PolicyError`` (infrastructure).
  503 and 429 are recorded as pauses (a weight swap): their waits add up in ``paused_s``;
- configuration (bad URL, rejected API key, wrong route, unknown model): ``PolicyConfigError``
  at once, since retrying cannot help;
- unusable answers (other 4xx, a 200 that is not a completion): ``PolicyResponseError``.

The API key is sent as a bearer token and scrubbed from every message this module produces.
``attempt`` (one request, transient failures returned rather than retried) and ``probe`` are
the building blocks of ``EndpointPool``, which adds its own routing, breaker and pause policy.
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
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
from envfarm.policy.profiles import CaptureOptions, TokenCapture

log = logging.getLogger(__name__)

RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
PAUSE_STATUSES = frozenset({429, 503})
"""Statuses of a server that is alive but not taking work now (a weight swap, no capacity)."""
_JSON = {"Content-Type": "application/json"}
_MODEL_MISSING = re.compile(
    r"model.*(does not exist|doesn't exist|not found|not exist)|(unknown|no such|invalid) model",
    re.IGNORECASE | re.DOTALL,
)


@dataclass(frozen=True)
class AttemptFailure:
    """A transient failure of one request attempt; the caller decides whether to retry."""

    cause: str
    """HTTP status and body excerpt, or the connection error (API key scrubbed)."""
    status: int | None = None
    """None when no answer came at all (connection refused or reset, timeout)."""
    retry_after: float | None = None
    error: BaseException | None = None
    elapsed_s: float = 0.0

    @property
    def paused(self) -> bool:
        return self.status in PAUSE_STATUSES


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

    ``capture`` (its server profile, ``policy.profiles``) decides the token-capture fields each
    request carries and how the answer's token ids, logprobs and policy version are read into
    ``Completion.tokens``; ``extra_body`` is merged into every request after them. The whole
    response is kept in ``Completion.raw``.
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
        capture: CaptureOptions | None = None,
        version_source: Callable[[], str | None] | None = None,
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
        self.tokens = TokenCapture(capture, version_source)
        """Token capture for this endpoint: request fields, profile detection, versions."""
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
        encoded, sent = self.encode(messages, tools, sampling)
        retries: list[RetryRecord] = []
        attempt = 0
        while True:
            result = await self.attempt(encoded, sent)
            if isinstance(result, Completion):
                result.attempts, result.retries = attempt + 1, retries
                result.paused_s = sum(r.delay_s + r.elapsed_s for r in retries if r.kind == "pause")
                return result
            if attempt == self.max_retries:
                raise PolicyError(
                    f"policy endpoint {self.url} failed after {attempt + 1} attempts; "
                    f"last error: {result.cause}"
                ) from result.error
            delay = self._delay(attempt, result.retry_after)
            retries.append(
                RetryRecord(
                    cause=result.cause,
                    delay_s=delay,
                    kind="pause" if result.paused else "error",
                    endpoint=self.base_url,
                    elapsed_s=result.elapsed_s,
                )
            )
            log.warning(
                "policy request to %s failed (%s); retrying in %.2fs", self.url, result.cause, delay
            )
            await asyncio.sleep(delay)
            attempt += 1

    def encode(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        sampling: SamplingParams,
    ) -> tuple[bytes, dict[str, Any]]:
        """The request body, and the sampling parameters it sends."""
        sent = sampling.to_request()
        payload: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            payload["tools"] = [_as_openai_tool(t) for t in tools]
        payload.update(self.tokens.request_fields())
        payload.update(self.extra_body)
        payload.update(sent)
        return json.dumps(payload).encode(), sent

    async def attempt(self, encoded: bytes, sent: dict[str, Any]) -> Completion | AttemptFailure:
        """One POST of an ``encode``d body: the completion, or the transient failure to retry.

        Failures retrying cannot fix are raised (PolicyConfigError, PolicyResponseError).
        """
        started = time.monotonic()
        try:
            status, headers, body = await self._post(encoded)
            if self.tokens.refused(status, body):  # auto profile, server rejects extensions
                status, headers, body = await self._post(self.tokens.without_fields(encoded))
        except aiohttp.ClientSSLError as exc:
            raise PolicyConfigError(f"TLS failed for {self.url}: {exc}") from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            cause = self._scrub(_describe(exc, self.request_timeout_s))
            return AttemptFailure(cause, error=exc, elapsed_s=time.monotonic() - started)
        if status == 200:
            completion = parse_completion(
                body,
                url=self.url,
                endpoint=self.base_url,
                model=self.model,
                sampling=sent,
                latency_s=time.monotonic() - started,
                scrub=self._scrub,
            )
            completion.tokens = self.tokens.read(completion.raw, headers)
            return completion
        if status not in RETRYABLE_STATUSES:
            raise self._rejected(status, body)
        return AttemptFailure(
            f"HTTP {status}: {self._excerpt(body)}",
            status=status,
            retry_after=parse_retry_after(headers.get("Retry-After")),
            elapsed_s=time.monotonic() - started,
        )

    async def probe(self, timeout_s: float) -> str | None:
        """``GET {base_url}/models``: None when it answers 200, else what went wrong."""
        try:
            async with self._get_session().get(
                f"{self.base_url}/models", timeout=aiohttp.ClientTimeout(total=timeout_s)
            ) as response:
                await response.read()
                return None if response.status == 200 else f"HTTP {response.status}"
        except (aiohttp.ClientError, TimeoutError) as exc:
            return self._scrub(_describe(exc, timeout_s))

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
