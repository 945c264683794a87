"""``EndpointPool``: one ``PolicyClient`` over several OpenAI-compatible endpoints with weights.

Routing. A request goes to the ready endpoint with the fewest requests in flight per unit of
weight (ties: the heavier, then the one listed first). A session (``session(key)``, one per
episode) stays on the endpoint that served it while that endpoint is ready, so the server's
prefix cache keeps its history; it moves only when its endpoint is ejected or paused.

Failures. Connection errors, timeouts and HTTP 408/500/502/504 count against the endpoint's
circuit breaker (``endpoints.py``: ejected after ``breaker_failures`` in a row, probed back). A
request that failed on one endpoint goes to another at once when there is one, else retries
after a backoff, up to ``max_retries`` failures. While every endpoint is ejected, requests wait
for one to come back, up to ``down_budget_s``, then raise PolicyError (infrastructure: the
controller retries the episode; it is never scored). A pool none of whose endpoints ever
answered does not wait: its URLs are more likely wrong than restarting.

Pauses. 503 and 429 come from a live server that is not taking work now (a weight swap, no
capacity), so they never count against the breaker. The endpoint is skipped for a backoff delay
(``Retry-After`` when sent) and the request goes elsewhere or waits, for up to ``pause_budget_s``
(minutes, where ordinary retries give up within seconds).

Rejections. A request body the server rejects (4xx, or a 500 from its request parser) is sent
once more (the endpoint is not at fault: no breaker count); rejected again, the call raises
``RequestRejected`` and the episode is invalid (``request_rejected``), never retried.

Aborts. A completion with finish reason ``abort`` (vLLM and SGLang abort running requests for a
weight update) counts as a pause: it is discarded and the same request is sent again. Resuming
the partial output is not done: through the chat API it means re-tokenizing text, and the turn
would mix tokens of two policies. Resending keeps every turn a complete sample from one policy;
the cost, the lost generation time, is recorded (``Completion.retries``, ``Completion.paused_s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from envfarm.errors import PolicyConfigError, PolicyError, PolicyResponseError
from envfarm.policy.attempts import AttemptFailure, SideRequestFailed, timeout_cause
from envfarm.policy.base import Completion, PolicyClient, RetryKind, SamplingParams
from envfarm.policy.endpoints import (
    CallState,
    EndpointSpec,
    EndpointStatus,
    PoolEndpoint,
    PoolSettings,
)
from envfarm.policy.openai import OpenAIPolicy
from envfarm.policy.profiles import TOKEN_PROFILES, CaptureOptions
from envfarm.policy.rejections import is_rejection, rejected_twice
from envfarm.policy.server_api import Renderer
from envfarm.policy.token_session import PoolRenderer, TokenSession, server_renderer
from envfarm.policy.toolparse import ToolParser

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_SESSIONS = 65_536
"""Session bindings kept (least recently used dropped): sessions are never closed explicitly."""


class EndpointPool(PolicyClient):
    """Routes chat completions over ``endpoints``; the module docstring has the policy."""

    def __init__(
        self,
        endpoints: Sequence[EndpointSpec],
        model: str,
        *,
        api_key: str | None = None,
        settings: PoolSettings | None = None,
        extra_body: Mapping[str, Any] | None = None,
        capture: CaptureOptions | None = None,
        version_source: Callable[[], str | None] | None = None,
        token_mode: bool = False,
        renderer: Renderer | None = None,
        tool_parser: ToolParser = "auto",
    ) -> None:
        """Each endpoint gets its own ``OpenAIPolicy`` (``capture`` and ``version_source`` as
        there: token capture detects each endpoint's server profile on its own).

        ``token_mode``: sessions send token ids (``policy.token_session``), rendering new
        messages with ``renderer`` (None: the server's own template) and parsing tool calls
        from the sampled text with ``tool_parser``."""
        self.token_mode, self.renderer, self.tool_parser = token_mode, renderer, tool_parser
        if not endpoints:
            raise PolicyConfigError("an endpoint pool needs at least one endpoint URL")
        self.model = model
        self.settings = settings or PoolSettings()
        self._endpoints: list[PoolEndpoint] = []
        for index, spec in enumerate(endpoints):
            key = spec.api_key.get_secret_value() if spec.api_key else api_key
            client = OpenAIPolicy(
                spec.url,
                model,
                api_key=key,
                max_retries=0,
                request_timeout_s=self.settings.request_timeout_s,
                extra_body=extra_body,
                capture=capture,
                version_source=version_source,
            )
            if any(e.url == client.base_url for e in self._endpoints):
                raise PolicyConfigError(f"policy endpoint {client.base_url} is listed twice")
            self._endpoints.append(PoolEndpoint(index, client, spec.weight))
        self._sessions: OrderedDict[str, PoolEndpoint] = OrderedDict()
        self._back = asyncio.Event()
        self._answered = False
        """Some endpoint answered once: an outage is worth waiting out, a wrong URL is not."""
        self._random = random.Random()

    def __repr__(self) -> str:
        return f"EndpointPool(endpoints={self.urls!r}, model={self.model!r})"

    @property
    def urls(self) -> list[str]:
        return [e.url for e in self._endpoints]

    def session(self, key: str) -> PolicyClient:
        if not self.token_mode:
            return PoolSession(self, key)

        async def generate(prompt: list[int], sampling: SamplingParams) -> Completion:
            return await self.generate(prompt, sampling, session=key)

        async def renderer() -> Renderer:
            if self.renderer is not None:
                return self.renderer
            client = self.helper_client(key)
            await client.prepare()
            return PoolRenderer(self, key, server_renderer(client).name)

        return TokenSession(generate, renderer, tool_parser=self.tool_parser, key=key)

    def status(self) -> list[EndpointStatus]:
        now = time.monotonic()
        return [e.status(now) for e in self._endpoints]

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        sampling: SamplingParams,
        *,
        session: str | None = None,
    ) -> Completion:
        bodies: dict[PoolEndpoint, tuple[bytes, dict[str, Any]]] = {}

        async def send(endpoint: PoolEndpoint) -> Completion | AttemptFailure:
            await endpoint.client.prepare()
            if endpoint not in bodies:  # request fields depend on the endpoint's server profile
                bodies[endpoint] = endpoint.client.encode(messages, tools, sampling)
            return await endpoint.client.attempt(*bodies[endpoint])

        return await self._call(session, send)

    async def generate(
        self, prompt: list[int], sampling: SamplingParams, *, session: str | None = None
    ) -> Completion:
        """A token-in/token-out call (``policy.generate``) with the pool's routing, breaker
        and pause handling; the completion's text is not parsed."""

        async def send(endpoint: PoolEndpoint) -> Completion | AttemptFailure:
            return await endpoint.client.attempt_generate(prompt, sampling)

        return await self._call(session, send)

    def helper_client(self, session: str | None = None) -> OpenAIPolicy:
        """The endpoint client a session's side requests (rendering, tokenizing) go to: the
        one the session is bound to, else the first that takes traffic."""
        bound = self._sessions.get(session) if session is not None else None
        if bound is not None and bound.state == "closed":
            return bound.client
        ready = [e for e in self._endpoints if e.state == "closed"] or self._endpoints
        return ready[0].client

    async def side_request(
        self, session: str | None, request: Callable[[OpenAIPolicy], Awaitable[T]]
    ) -> T:
        """``request`` on the endpoint ``session`` is bound to: a side request (rendering,
        tokenizing) with the routing, breaker and outage handling of a completion. A failure
        a retry may fix (``SideRequestFailed``: no answer, HTTP 408/429/5xx) is retried, and
        while every endpoint is down the request waits for one to come back (up to
        ``down_budget_s``): a token-mode turn rides out a server restart as its completion
        does, instead of failing its episode at the first refused connection."""
        call = CallState(session)
        while True:
            endpoint = await self._next_endpoint(call)
            call.attempts += 1
            endpoint.in_flight += 1
            try:
                answer = await request(endpoint.client)
            except SideRequestFailed as exc:
                failure = exc.failure
            else:
                self._answered = True
                endpoint.succeeded()
                return answer
            finally:
                endpoint.in_flight -= 1
            if failure.status is not None:
                self._answered = True
            if failure.paused:
                cause, elapsed = failure.cause, failure.elapsed_s
                self._paused(call, endpoint, "pause", cause, failure.retry_after, elapsed)
            else:
                self._failed(call, endpoint, failure)

    async def preflight(self, *, token_mode: bool = False) -> None:
        """Probe every endpoint's server profile now; with ``token_mode``, PolicyConfigError
        unless every endpoint takes token ids."""
        for endpoint in self._endpoints:
            await endpoint.client.prepare()
            profile, reason = endpoint.client.tokens.profile, endpoint.client.tokens.reason
            if token_mode and profile == "sglang" and self.renderer is None:
                raise PolicyConfigError(
                    f"token mode on {endpoint.url} (SGLang) needs --tokenizer: SGLang has no "
                    "endpoint that renders the chat template into ids"
                )
            if token_mode and profile not in TOKEN_PROFILES:
                raise PolicyConfigError(
                    f"token mode was asked for, but {endpoint.url} cannot take a prompt of token "
                    f"ids: its server profile is {profile} ({reason}). Token mode needs vLLM, "
                    "SGLang or llama.cpp (name it with --server-profile when detection cannot "
                    "tell); without --token-mode, messages are sent and the server renders them"
                )
            log.info("policy endpoint %s: server profile %s (%s)", endpoint.url, profile, reason)

    async def _call(
        self,
        session: str | None,
        send: Callable[[PoolEndpoint], Awaitable[Completion | AttemptFailure]],
    ) -> Completion:
        call = CallState(session)
        rejected: PolicyResponseError | None = None
        while True:
            endpoint = await self._next_endpoint(call)
            call.attempts += 1
            endpoint.in_flight += 1
            try:
                result = await send(endpoint)
            except PolicyResponseError as exc:
                if not is_rejection(exc) or rejected is not None:
                    raise rejected_twice(exc, rejected) from exc
                rejected = exc  # sent once more; the endpoint is not at fault
                call.note("error", str(exc), endpoint.url, 0.0)
                continue
            finally:
                endpoint.in_flight -= 1
            rejected = None
            if isinstance(result, Completion) or result.status is not None:
                self._answered = True
            if isinstance(result, Completion):
                endpoint.succeeded()
                if not _aborted(result):
                    endpoint.served += 1
                    result.attempts += call.attempts - 1  # a re-ask for token data counts
                    result.retries = call.retries
                    result.paused_s = call.paused_s()
                    return result
                cause = "the server aborted the generation (finish_reason abort)"
                self._paused(call, endpoint, "abort", cause, None, result.latency_s)
            elif result.paused:
                cause, elapsed = result.cause, result.elapsed_s
                self._paused(call, endpoint, "pause", cause, result.retry_after, elapsed)
            else:
                self._failed(call, endpoint, result)

    async def aclose(self) -> None:
        for endpoint in self._endpoints:
            await endpoint.aclose()

    def _choose(self, call: CallState) -> PoolEndpoint | None:
        now = time.monotonic()
        ready = [e for e in self._endpoints if e.ready(now)]
        preferred = [e for e in ready if e not in call.avoid] or ready
        if not preferred:
            return None
        bound = self._sessions.get(call.session) if call.session is not None else None
        if bound is None or bound not in preferred:
            bound = min(preferred, key=PoolEndpoint.rank)
        if call.session is not None:
            self._sessions[call.session] = bound
            self._sessions.move_to_end(call.session)
            if len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        return bound

    async def _next_endpoint(self, call: CallState) -> PoolEndpoint:
        """The endpoint for the next attempt, after whatever wait the pool's state calls for."""
        settings = self.settings
        while True:
            endpoint = self._choose(call)
            if endpoint is not None and endpoint is call.backoff_from and call.backoff_s > 0:
                delay, call.backoff_s = call.backoff_s, 0.0
                await asyncio.sleep(delay)
                call.retries[-1].delay_s += delay
                continue
            call.backoff_from = None
            if endpoint is not None:
                call.down_since = None
                return endpoint
            now = time.monotonic()
            live = [e for e in self._endpoints if e.state == "closed"]
            if live:  # all paused
                cause = "every endpoint is paused"
                remaining = call.pause_clock(now, settings.pause_budget_s, cause)
                delay = max(0.0, min(min(e.paused_until for e in live) - now, remaining))
                record = call.waiting("pause", cause)
                await asyncio.sleep(delay)
                record.delay_s += delay
                continue
            if not self._answered:
                cause = call.last_cause()
                hint = "check the URLs"
                if cause.endswith(timeout_cause(settings.request_timeout_s)):
                    hint += (  # a server too slow for one completion looks the same
                        ", or whether one completion takes the server longer than the request "
                        f"timeout ({settings.request_timeout_s:g}s, pool.request_timeout_s)"
                    )
                raise PolicyError(
                    f"no policy endpoint has answered ({', '.join(self.urls)}); {hint}; "
                    f"last error: {cause}"
                )
            if call.down_since is None:
                call.down_since = now
            remaining = call.down_since + settings.down_budget_s - now
            if remaining <= 0:
                raise PolicyError(
                    f"every policy endpoint is down ({', '.join(self.urls)}) and none came back "
                    f"within {settings.down_budget_s:g}s; last error: {call.last_cause()}"
                )
            record = call.waiting("unavailable", "every endpoint is ejected")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._back.wait()
            record.delay_s += time.monotonic() - now

    def _paused(
        self,
        call: CallState,
        endpoint: PoolEndpoint,
        kind: RetryKind,
        cause: str,
        retry_after: float | None,
        elapsed_s: float,
    ) -> None:
        now = time.monotonic()
        call.note(kind, cause, endpoint.url, elapsed_s)
        settings = self.settings
        call.pause_clock(now, settings.pause_budget_s, f"{endpoint.url}: {cause}", elapsed_s)
        if retry_after is not None:
            delay = min(retry_after, settings.pause_backoff_max_s)
        else:
            ceiling = settings.pause_backoff_base_s * 2**call.pauses
            ceiling = min(settings.pause_backoff_max_s, ceiling)
            delay = self._random.uniform(ceiling / 2, ceiling)
        call.pauses += 1
        endpoint.pause(now + delay)
        log.info("policy endpoint %s is paused (%s); retrying in %.2fs", endpoint.url, cause, delay)

    def _failed(self, call: CallState, endpoint: PoolEndpoint, failure: AttemptFailure) -> None:
        settings = self.settings
        call.note("error", failure.cause, endpoint.url, failure.elapsed_s)
        call.errors += 1
        if endpoint.failed(settings.breaker_failures):
            endpoint.eject(
                failure.cause, settings.cooldown_s, settings.probe_timeout_s, self._endpoint_back
            )
        if call.errors > settings.max_retries:
            raise PolicyError(
                f"policy request failed {call.errors} times ({', '.join(self.urls)}); "
                f"last error: {endpoint.url}: {failure.cause}"
            ) from failure.error
        call.avoid.add(endpoint)
        call.backoff_from = endpoint
        if failure.retry_after is not None:
            call.backoff_s = min(failure.retry_after, settings.backoff_max_s)
        else:
            ceiling = min(settings.backoff_max_s, settings.backoff_base_s * 2 ** (call.errors - 1))
            call.backoff_s = self._random.uniform(0, ceiling)

    def _endpoint_back(self) -> None:
        self._answered = True
        back, self._back = self._back, asyncio.Event()
        back.set()


class PoolSession(PolicyClient):
    """One session's view of an ``EndpointPool``: its requests stay on one endpoint while it is
    ready. Closing it does nothing; close the pool."""

    def __init__(self, pool: EndpointPool, key: str) -> None:
        self.pool, self.key = pool, key
        self.model = pool.model

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        sampling: SamplingParams,
    ) -> Completion:
        return await self.pool.complete(messages, tools, sampling, session=self.key)

    def session(self, key: str) -> PolicyClient:
        return self.pool.session(key)


def _aborted(completion: Completion) -> bool:
    if completion.finish_reason == "abort":
        return True
    choices = completion.raw.get("choices")
    reason = choices[0].get("finish_reason") if isinstance(choices, list) and choices else None
    return isinstance(reason, dict) and reason.get("type") == "abort"
