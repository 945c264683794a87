"""Client for OpenAI-compatible chat completions with tools (vLLM, SGLang, Fireworks, ...).

Failures fall in three classes, decided once here:

- transient (HTTP 408, 429, 500, 502, 503, 504, connection errors, timeouts): retried with
  exponential backoff and full jitter, or after ``Retry-After`` when the server sends one
  (capped at ``backoff_max_s``); when retries run out, ``PolicyError`` (infrastructure).
  503 and 429 are recorded as pauses (a weight swap): their waits add up in ``paused_s``;
- configuration (bad URL, rejected API key, wrong route, unknown model): ``PolicyConfigError``
  at once, since retrying cannot help;
- unusable answers (a 200 that is not a completion): ``PolicyResponseError``;
- a prompt longer than the model's context (a 400 that says so, in vLLM's, SGLang's,
  llama.cpp's or OpenAI's words): ``ContextLengthExceeded``, which ends the session with the
  ``context_length`` outcome (graded: it is the model's limit);
- any other rejected request body (other 4xx, or a 500 raised by the server's own parser of the
  request, as llama.cpp answers a history it cannot parse): ``PolicyResponseError`` for the
  first rejection, which is sent once more; a second rejection in a row is ``RequestRejected``
  (the episode is invalid, ``request_rejected``; the endpoint is not at fault and not ejected).

An answer that lacks the token data its profile asks for is asked again once (``reask``).
The API key is sent as a bearer token and scrubbed from every message this module produces.
``attempt`` (one request, transient failures returned rather than retried) and ``probe`` are
the building blocks of ``EndpointPool``, which adds its own routing, breaker and pause policy.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import random
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, cast
from urllib.parse import urlsplit

import aiohttp

from envfarm.errors import (
    ContextLengthExceeded,
    PolicyConfigError,
    PolicyError,
    PolicyResponseError,
)
from envfarm.policy.attempts import (
    RETRYABLE_STATUSES,
    AttemptFailure,
    SideRequestFailed,
    describe_error,
    parse_retry_after,
)
from envfarm.policy.base import (
    EXCERPT_CHARS,
    Completion,
    PolicyClient,
    RetryRecord,
    SamplingParams,
    parse_completion,
)
from envfarm.policy.generate import (
    GenerateDialect,
    generate_path,
    generate_request,
    read_generated,
)
from envfarm.policy.profiles import TOKEN_PROFILES, CaptureOptions, TokenCapture
from envfarm.policy.reask import needs_reask, reasked
from envfarm.policy.rejections import (
    is_rejection,
    parser_error,
    rejected_twice,
    says_context_length,
    says_model_missing,
)
from envfarm.policy.server_api import llamacpp_prompt_ids

log = logging.getLogger(__name__)

_JSON = {"Content-Type": "application/json"}


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
        await self.prepare()
        encoded, sent = self.encode(messages, tools, sampling)
        retries: list[RetryRecord] = []
        attempt = 0
        rejected: PolicyResponseError | None = None
        while True:
            try:
                result = await self.attempt(encoded, sent)
            except PolicyResponseError as exc:
                if not is_rejection(exc) or rejected is not None:
                    raise rejected_twice(exc, rejected) from exc
                rejected = exc
                retries.append(RetryRecord(cause=str(exc), delay_s=0.0, endpoint=self.base_url))
                attempt += 1
                continue
            rejected = None
            if isinstance(result, Completion):
                result.attempts, result.retries = result.attempts + attempt, retries
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

    async def prepare(self) -> None:
        """Settle an ``auto`` server profile by probing the server (once) before encoding."""
        if not self.tokens.probed:
            await self.tokens.probe(self.get_json)

    @property
    def root_url(self) -> str:
        """The server's root: the base URL without its ``/v1`` (where llama.cpp's, SGLang's
        and vLLM's own APIs live)."""
        return self.base_url.removesuffix("/v1")

    async def get_json(self, path: str) -> Any:
        """``GET {root_url}{path}``: the JSON of a 200 answer, else None (never raises)."""
        try:
            async with self._get_session().get(
                self.root_url + path, timeout=aiohttp.ClientTimeout(total=30)
            ) as response:
                if response.status != 200:
                    return None
                return json.loads(await response.read())
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None

    async def post_json(self, url: str, payload: Any) -> tuple[int, Mapping[str, str], bytes]:
        """``POST url`` with a JSON body (status, headers, body); no answer (a connection error,
        a timeout) raises ``SideRequestFailed``, a ``PolicyError`` the pool retries."""
        try:
            return await self._post(json.dumps(payload).encode(), url)
        except (aiohttp.ClientError, TimeoutError) as exc:
            cause = f"POST {url} failed: {self._scrub(describe_error(exc, 30))}"
            raise SideRequestFailed(AttemptFailure(cause, error=exc)) from exc

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
        An answer without its token data is asked again once, with the profile's fields.

        Failures retrying cannot fix are raised (PolicyConfigError, PolicyResponseError).
        """
        first = await self._chat(encoded, sent)
        if not isinstance(first, Completion) or not needs_reask(first):
            return first
        again = self.tokens.with_fields(encoded, self.extra_body, sent)
        ask = partial(self._chat, again, sent)
        return await reasked(first, ask, endpoint=self.base_url, profile=self.tokens.profile)

    async def _chat(self, encoded: bytes, sent: dict[str, Any]) -> Completion | AttemptFailure:
        started = time.monotonic()
        try:
            status, headers, body = await self._post(encoded)
            if self.tokens.refused(status, body):  # auto profile, server rejects extensions
                status, headers, body = await self._post(self.tokens.without_fields(encoded))
        except aiohttp.ClientSSLError as exc:
            raise PolicyConfigError(f"TLS failed for {self.url}: {exc}") from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            cause = self._scrub(describe_error(exc, self.request_timeout_s))
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
            if self.tokens.profile == "llamacpp" and not completion.tokens.lacking:
                await llamacpp_prompt_ids(self, encoded, completion)
            return completion
        return self._failure(status, headers, body, started)

    async def attempt_generate(
        self, prompt: list[int], sampling: SamplingParams
    ) -> Completion | AttemptFailure:
        """One token-in/token-out request (``policy.generate``) of ``prompt``; failures as in
        ``attempt``. The completion's ``message`` is empty: the caller parses the text."""
        await self.prepare()
        dialect = self.tokens.profile
        if dialect not in TOKEN_PROFILES:
            raise PolicyConfigError(
                f"token mode needs a server that takes token ids (vLLM, SGLang, llama.cpp); "
                f"{self.base_url} has profile {dialect} ({self.tokens.reason})"
            )
        generate = cast(GenerateDialect, dialect)
        first = await self._generate(generate, prompt, sampling)
        if not isinstance(first, Completion) or not needs_reask(first):
            return first
        ask = partial(self._generate, generate, prompt, sampling)
        return await reasked(first, ask, endpoint=self.base_url, profile=generate)

    async def _generate(
        self, generate: GenerateDialect, prompt: list[int], sampling: SamplingParams
    ) -> Completion | AttemptFailure:
        payload, sent = generate_request(generate, self.model, prompt, sampling)
        where, path = generate_path(generate)
        url = (self.base_url if where == "base" else self.root_url) + path
        started = time.monotonic()
        try:
            status, headers, body = await self._post(json.dumps(payload).encode(), url)
        except aiohttp.ClientSSLError as exc:
            raise PolicyConfigError(f"TLS failed for {url}: {exc}") from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            cause = self._scrub(describe_error(exc, self.request_timeout_s))
            return AttemptFailure(cause, error=exc, elapsed_s=time.monotonic() - started)
        if status != 200:
            return self._failure(status, headers, body, started, url)
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise PolicyResponseError(
                f"policy endpoint {url} answered HTTP 200 but not with a JSON object: "
                f"{self._excerpt(body)}",
                status=200,
            )
        generated = read_generated(generate, data, prompt)
        tokens = generated.tokens
        tokens.server_profile, tokens.server_profile_reason = generate, self.tokens.reason
        if generated.version is not None:
            tokens.policy_version, tokens.policy_version_source = generated.version, "response"
        else:
            self.tokens.stamp(tokens, headers)
        served = data.get("model")
        return Completion(
            content=generated.text,
            tool_calls=[],
            finish_reason=generated.finish_reason,
            usage=generated.usage,
            latency_s=time.monotonic() - started,
            endpoint=self.base_url,
            model=served if isinstance(served, str) and served else self.model,
            message={},
            sampling=sent,
            raw=data,
            tokens=tokens,
        )

    def _failure(
        self,
        status: int,
        headers: Mapping[str, str],
        body: bytes,
        started: float,
        url: str | None = None,
    ) -> AttemptFailure:
        """A non-200 answer as a transient failure, or the error retrying cannot fix."""
        if status not in RETRYABLE_STATUSES or parser_error(status, body):
            raise self._rejected(status, body, url)
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
            return self._scrub(describe_error(exc, timeout_s))

    async def aclose(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def _post(
        self, body: bytes, url: str | None = None
    ) -> tuple[int, Mapping[str, str], bytes]:
        # A stream, not bytes: aiohttp warns that large byte bodies (long histories) can block
        # the event loop while sending.
        data = io.BytesIO(body)
        target = url or self.url
        async with self._get_session().post(target, data=data, headers=_JSON) as response:
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

    def _rejected(self, status: int, body: bytes, url: str | None = None) -> PolicyError:
        said = self._excerpt(body)
        target = url or self.url
        if status in (401, 403):
            hint = "check the API key" if self._api_key else "no API key was given"
            return PolicyConfigError(
                f"policy endpoint {target} refused the request with HTTP {status} ({hint}): {said}"
            )
        if status in (400, 404) and says_model_missing(body):
            return PolicyConfigError(
                f"policy endpoint {self.base_url} does not serve model {self.model!r} "
                f"(HTTP {status}): {said}"
            )
        if status == 404:
            return PolicyConfigError(
                f"POST {target} returned HTTP 404: is this an OpenAI-compatible /v1 base URL? "
                f"(base URL given: {self.base_url})"
            )
        if status in (400, 413, 422) and says_context_length(body):
            return ContextLengthExceeded(
                f"policy endpoint {target} refused the prompt as longer than the model's "
                f"context (HTTP {status}): {said}"
            )
        return PolicyResponseError(
            f"policy endpoint {target} rejected the request with HTTP {status}: {said}",
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
