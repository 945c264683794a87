"""EndpointPool against real loopback servers: routing, affinity, breaker, pauses, aborts."""

from __future__ import annotations

import asyncio
import json
import socket
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest

from envfarm.errors import PolicyConfigError, PolicyError
from envfarm.policy import (
    Completion,
    EndpointPool,
    EndpointSpec,
    OpenAIPolicy,
    PolicyServer,
    PoolSettings,
    Reply,
    SamplingParams,
    completion_reply,
    error_reply,
)
from envfarm.testing.scripted import FaultyResponder, Step, completion
from tests.waiting import until

MESSAGES = [{"role": "user", "content": "Fix the bug."}]
FAST = PoolSettings(
    backoff_base_s=0.001,
    backoff_max_s=0.01,
    breaker_failures=2,
    cooldown_s=0.02,
    down_budget_s=30,
    pause_budget_s=30,
    pause_backoff_base_s=0.001,
    pause_backoff_max_s=0.005,
)
PAUSED = error_reply(503, "generation is paused for a weight update; retry shortly")


class Endpoint:
    """A stateless policy that answers ``ok``, counts requests and can hold them."""

    def __init__(self, *, hold: bool = False) -> None:
        self.requests: list[dict[str, Any]] = []
        self.release = asyncio.Event()
        if not hold:
            self.release.set()

    async def __call__(self, request: dict[str, Any]) -> Reply:
        self.requests.append(request)
        await self.release.wait()
        return completion_reply(str(request["model"]), content="ok")


@asynccontextmanager
async def serving(*responders: Callable[[dict[str, Any]], Awaitable[Reply]], **kw: Any) -> Any:
    async with AsyncExitStack() as stack:
        servers = [await stack.enter_async_context(PolicyServer(r, **kw)) for r in responders]
        yield servers


@asynccontextmanager
async def pool_of(
    *urls: str | tuple[str, float], settings: PoolSettings = FAST, **kw: Any
) -> AsyncIterator[EndpointPool]:
    specs = [
        EndpointSpec(url=u) if isinstance(u, str) else EndpointSpec(url=u[0], weight=u[1])
        for u in urls
    ]
    async with EndpointPool(specs, "m", settings=settings, **kw) as pool:
        assert isinstance(pool, EndpointPool)
        yield pool


async def ask(client: Any) -> Completion:
    result = await client.complete(MESSAGES, [], SamplingParams())
    assert isinstance(result, Completion)
    return result


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


async def test_concurrent_requests_split_by_weight() -> None:
    light, heavy = Endpoint(hold=True), Endpoint(hold=True)
    async with serving(light, heavy) as (a, b), pool_of((a.base_url, 1), (b.base_url, 3)) as pool:
        tasks = [asyncio.create_task(ask(pool)) for _ in range(40)]
        await until(lambda: len(light.requests) + len(heavy.requests) == 40)
        assert (len(light.requests), len(heavy.requests)) == (10, 30)
        assert [s.in_flight for s in pool.status()] == [10, 30]
        light.release.set()
        heavy.release.set()
        results = await asyncio.gather(*tasks)
    assert Counter(r.endpoint for r in results) == {a.base_url: 10, b.base_url: 30}
    assert [s.served for s in pool.status()] == [10, 30]


async def test_new_requests_go_to_the_least_loaded_endpoint() -> None:
    busy, idle = Endpoint(hold=True), Endpoint()
    async with serving(busy, idle) as (a, b), pool_of(a.base_url, b.base_url) as pool:
        held = asyncio.create_task(ask(pool))
        await until(lambda: len(busy.requests) == 1)
        results = [await ask(pool) for _ in range(5)]
        busy.release.set()
        assert (await held).endpoint == a.base_url
    assert {r.endpoint for r in results} == {b.base_url}
    assert len(busy.requests) == 1


async def test_a_session_stays_on_its_endpoint() -> None:
    first, second = Endpoint(), Endpoint()
    async with serving(first, second) as (a, b), pool_of(a.base_url, b.base_url) as pool:
        one, two = pool.session("episode-1"), pool.session("episode-2")
        opening = await asyncio.gather(ask(one), ask(two))
        assert [r.endpoint for r in opening] == [a.base_url, b.base_url]
        for _ in range(4):
            assert (await ask(one)).endpoint == a.base_url
            assert (await ask(two)).endpoint == b.base_url
            # Without a session, an idle pool breaks the tie towards the first endpoint.
            assert (await ask(pool)).endpoint == a.base_url
    assert (len(first.requests), len(second.requests)) == (9, 5)


async def test_a_single_client_is_its_own_session() -> None:
    client = OpenAIPolicy("http://127.0.0.1:9/v1", "m")
    assert client.session("episode-1") is client


async def test_dead_endpoint_is_ejected_traffic_moves_and_a_probe_brings_it_back() -> None:
    first, second = Endpoint(), Endpoint()
    async with serving(first, second) as (a, b), pool_of(a.base_url, b.base_url) as pool:
        session = pool.session("episode")
        assert (await ask(session)).endpoint == a.base_url
        wave = await asyncio.gather(*(ask(pool) for _ in range(10)))
        assert Counter(r.endpoint for r in wave) == {a.base_url: 5, b.base_url: 5}

        await a.close()
        wave = await asyncio.gather(*(ask(pool) for _ in range(20)), ask(session))
        assert {r.endpoint for r in wave} == {b.base_url}
        failed_over = [r for r in wave if r.retries]
        assert failed_over
        assert all(
            rec.kind == "error" and rec.endpoint == a.base_url
            for r in failed_over
            for rec in r.retries
        )
        assert pool.status()[0].state in ("open", "probing")
        assert pool.status()[1].state == "closed"
        assert (await ask(session)).endpoint == b.base_url

        served_before = len(first.requests)
        await a.start()
        await until(lambda: pool.status()[0].state == "closed")
        wave = await asyncio.gather(*(ask(pool) for _ in range(10)))
        assert Counter(r.endpoint for r in wave) == {a.base_url: 5, b.base_url: 5}
        assert len(first.requests) == served_before + 5
        assert (await ask(session)).endpoint == b.base_url  # it moved, and stays


async def test_a_request_that_failed_on_one_endpoint_goes_to_another_at_once() -> None:
    dead = closed_port_url()
    settings = FAST.model_copy(update={"breaker_failures": 100, "max_retries": 1})
    async with (
        serving(Endpoint()) as (alive,),
        pool_of(dead, alive.base_url, settings=settings) as pool,
    ):
        results = [await ask(pool) for _ in range(5)]
        assert pool.status()[0].state == "closed"  # not ejected: each request moved on its own
    assert {r.endpoint for r in results} == {alive.base_url}
    assert [[(x.kind, x.endpoint) for x in r.retries] for r in results] == [[("error", dead)]] * 5


async def test_every_endpoint_down_waits_and_resumes_when_one_comes_back() -> None:
    endpoint = Endpoint()
    async with serving(endpoint) as (server,), pool_of(server.base_url) as pool:
        await ask(pool)
        await server.close()
        pending = asyncio.create_task(ask(pool))
        await until(lambda: pool.status()[0].state != "closed")
        await server.start()
        result = await pending
    assert result.content == "ok"
    assert result.endpoint == server.base_url
    kinds = [r.kind for r in result.retries]
    assert kinds[:2] == ["error", "error"]
    assert "unavailable" in kinds
    assert result.paused_s == 0


async def test_every_endpoint_down_beyond_the_budget_raises_policy_error() -> None:
    settings = FAST.model_copy(update={"down_budget_s": 0.1})
    key = "sk-secret-7f3a"
    async with (
        serving(Endpoint(), Endpoint(), api_key=key) as servers,
        pool_of(*(s.base_url for s in servers), settings=settings, api_key=key) as pool,
    ):
        await asyncio.gather(ask(pool), ask(pool))
        for server in servers:
            await server.close()
        with pytest.raises(PolicyError) as caught:
            await ask(pool)
    error = caught.value
    assert type(error) is PolicyError
    assert error.infrastructure
    assert error.retryable
    assert "every policy endpoint is down" in str(error)
    assert all(server.base_url in str(error) for server in servers)
    assert key not in str(error)


async def test_endpoints_that_never_answered_fail_fast_instead_of_waiting() -> None:
    urls = [closed_port_url(), closed_port_url()]
    settings = FAST.model_copy(update={"down_budget_s": 3600})
    async with pool_of(*urls, settings=settings, api_key="sk-secret-7f3a") as pool:
        with pytest.raises(PolicyError, match="no policy endpoint has answered") as caught:
            await ask(pool)
    assert all(url in str(caught.value) for url in urls)
    assert "sk-secret-7f3a" not in str(caught.value)


async def test_a_server_too_slow_for_the_request_timeout_is_named_as_a_possible_cause() -> None:
    """A server that takes every request but never completes one in time (a CPU model on a
    loaded machine) fails like a wrong URL, but the error says it may be the timeout."""
    release = asyncio.Event()

    async def hang(request: dict[str, Any]) -> Reply:
        await release.wait()
        return Reply(status=200, body={})

    settings = FAST.model_copy(update={"request_timeout_s": 0.2, "down_budget_s": 3600})
    async with serving(hang) as (server,), pool_of(server.base_url, settings=settings) as pool:
        try:
            with pytest.raises(PolicyError, match="no policy endpoint has answered") as caught:
                await ask(pool)
        finally:
            release.set()
    assert "longer than the request timeout (0.2s, pool.request_timeout_s)" in str(caught.value)
    assert "no complete answer within 0.2s" in str(caught.value)


async def test_a_503_storm_is_ridden_out_without_tripping_the_breaker() -> None:
    storm = FaultyResponder(Endpoint(), [PAUSED] * 30)
    async with serving(storm) as (server,), pool_of(server.base_url) as pool:
        result = await ask(pool.session("episode"))
        assert pool.status()[0].state == "closed"
        assert pool.status()[0].consecutive_failures == 0
    assert result.content == "ok"
    assert result.attempts == 31
    assert [r.kind for r in result.retries] == ["pause"] * 30
    assert all(r.endpoint == server.base_url and "HTTP 503" in r.cause for r in result.retries)
    assert result.paused_s > 0
    assert result.paused_s == pytest.approx(sum(r.delay_s + r.elapsed_s for r in result.retries))


async def test_a_paused_endpoint_is_skipped_while_another_serves() -> None:
    paused = FaultyResponder(Endpoint(), [Reply(status=429, headers={"Retry-After": "120"})])
    serving_one = Endpoint()
    settings = FAST.model_copy(update={"pause_backoff_max_s": 600})
    async with (
        serving(paused, serving_one) as (a, b),
        pool_of(a.base_url, b.base_url, settings=settings) as pool,
    ):
        first = await ask(pool)
        later = [await ask(pool) for _ in range(5)]
        status = pool.status()[0]
    assert first.endpoint == b.base_url
    assert [(r.kind, r.endpoint, r.delay_s) for r in first.retries] == [("pause", a.base_url, 0)]
    assert {r.endpoint for r in later} == {b.base_url}
    assert len(paused.requests) == 1
    assert status.paused
    assert status.state == "closed"


async def test_pauses_beyond_the_pause_budget_raise_policy_error() -> None:
    forever = FaultyResponder(Endpoint(), [PAUSED] * 10_000)
    settings = FAST.model_copy(update={"pause_budget_s": 0.05})
    async with serving(forever) as (server,), pool_of(server.base_url, settings=settings) as pool:
        with pytest.raises(PolicyError, match=r"pause budget of 0\.05s"):
            await ask(pool)
        assert pool.status()[0].state == "closed"


async def test_aborted_generations_are_discarded_and_sent_again() -> None:
    aborted: list[Step] = [
        completion("half an answ", finish_reason="abort"),
        completion("half", choice_extra={"finish_reason": {"type": "abort", "message": "upd"}}),
    ]
    responder = FaultyResponder(Endpoint(), aborted)
    async with serving(responder) as (server,), pool_of(server.base_url) as pool:
        result = await pool.complete(
            MESSAGES, [], SamplingParams(temperature=0.7, seed=3), session="episode"
        )
    assert result.content == "ok"
    assert result.finish_reason == "stop"
    assert result.attempts == 3
    assert [r.kind for r in result.retries] == ["abort", "abort"]
    assert result.paused_s >= sum(r.elapsed_s for r in result.retries)
    assert len(responder.requests) == 3
    assert all(r == responder.requests[0] for r in responder.requests)
    assert responder.requests[0]["seed"] == 3


async def test_persistent_errors_give_up_after_max_retries() -> None:
    broken = FaultyResponder(Endpoint(), [error_reply(500, "boom", type="server_error")] * 100)
    settings = FAST.model_copy(update={"max_retries": 3})
    async with serving(broken) as (server,), pool_of(server.base_url, settings=settings) as pool:
        with pytest.raises(PolicyError, match="failed 4 times") as caught:
            await ask(pool)
    assert "HTTP 500" in str(caught.value)
    assert len(broken.requests) == 4


async def test_each_endpoint_gets_its_own_api_key_and_no_key_is_ever_shown() -> None:
    keys = {"sk-site-a-91c2", "sk-site-b-04d7"}
    first, second = Endpoint(), Endpoint()
    async with (
        PolicyServer(first, api_key="sk-site-a-91c2") as a,
        PolicyServer(second, api_key="sk-site-b-04d7") as b,
    ):
        specs = [
            EndpointSpec(url=a.base_url, api_key="sk-site-a-91c2"),
            EndpointSpec(url=b.base_url, api_key="sk-site-b-04d7"),
        ]
        async with EndpointPool(specs, "m", settings=FAST) as pool:
            results = await asyncio.gather(*(ask(pool) for _ in range(4)))
            shown = repr(pool) + json.dumps([s.model_dump() for s in pool.status()])
    assert Counter(r.endpoint for r in results) == {a.base_url: 2, b.base_url: 2}
    shown += "".join(r.model_dump_json() for r in results) + repr(specs)
    assert not any(key in shown for key in keys)


def test_pool_configuration_errors_are_clear() -> None:
    with pytest.raises(PolicyConfigError, match="at least one endpoint"):
        EndpointPool([], "m")
    with pytest.raises(PolicyConfigError, match="listed twice"):
        EndpointPool([EndpointSpec(url="http://h:1/v1"), EndpointSpec(url="http://h:1/v1/")], "m")
    with pytest.raises(PolicyConfigError, match="invalid policy base URL"):
        EndpointPool([EndpointSpec(url="h:1/v1")], "m")
    with pytest.raises(ValueError, match="greater than 0"):
        EndpointSpec(url="http://h:1/v1", weight=0)
