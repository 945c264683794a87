"""Server-profile detection is done once per endpoint, and no request goes out before it.

Each test starts first requests together against a server whose own API answers the probe
late (``FakeEngine(probe_gate=...)``, real HTTP on loopback, through the endpoint pool the CLI
uses). Every request must wait for the one probe and then carry the fields of the profile it
found. Before this was fixed the endpoint counted as probed as soon as the probe was sent: a
second first request went out at once with the fallback fields, which llama.cpp answers without
logprobs (issue 40).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from envfarm.agent.tools import tool_schemas
from envfarm.policy import CaptureOptions, EndpointSpec, PoolSettings
from envfarm.policy.base import Completion, PolicyClient, SamplingParams
from envfarm.policy.pool import EndpointPool
from envfarm.testing.fake_engine import EngineDialect, FakeEngine
from envfarm.testing.scripted import tool_call
from tests.detection import ANSWERS, CHAT, assert_settled_before_any_request, probe_paths

FAST = PoolSettings(max_retries=3, backoff_base_s=0.0, backoff_max_s=0.0, cooldown_s=0.01)
START = [{"role": "system", "content": "Be useful."}, {"role": "user", "content": "Fix it."}]
PROFILES: list[EngineDialect] = ["vllm", "sglang", "llamacpp", "openai"]


@asynccontextmanager
async def late_probe(dialect: EngineDialect) -> AsyncIterator[tuple[FakeEngine, EndpointPool]]:
    engine = FakeEngine([tool_call("submit", {})] * 2, dialect=dialect, probe_gate=asyncio.Event())
    async with engine:
        capture = CaptureOptions(profile="auto")
        pool = EndpointPool(
            [EndpointSpec(url=engine.base_url)], "fake", settings=FAST, capture=capture
        )
        try:
            yield engine, pool
        finally:
            await pool.aclose()


def begin(client: PolicyClient) -> tuple[asyncio.Task[Completion], asyncio.Event]:
    """A first request started as a task, and an event set as it begins. A waiter on the event
    resumes only after the task has run up to its first wait: by then the request either waits
    for the probe or has been encoded and is on its way."""
    began = asyncio.Event()

    async def first_turn() -> Completion:
        began.set()
        return await client.complete(START, tool_schemas(), SamplingParams())

    return asyncio.create_task(first_turn()), began


@pytest.mark.parametrize("dialect", PROFILES)
async def test_concurrent_first_requests_wait_for_the_one_probe(dialect: EngineDialect) -> None:
    async with late_probe(dialect) as (engine, pool):
        started = [begin(pool.session(f"episode-{i}")) for i in range(2)]
        for _, began in started:
            await began.wait()
        await engine.probing.wait()  # the probe is at the server, and held there
        assert engine.probe_gate is not None
        engine.probe_gate.set()
        done = await asyncio.gather(*(task for task, _ in started))
    assert_settled_before_any_request(engine, dialect)
    gets = [e.removeprefix("GET ") for e in engine.timeline if e.startswith("GET ")]
    assert gets == probe_paths(dialect)  # one probe for both requests
    for completion in done:
        tokens = completion.tokens
        assert tokens is not None
        assert tokens.server_profile == dialect
        assert tokens.faults == []
        if dialect in ANSWERS:
            assert ANSWERS[dialect] in (tokens.server_profile_reason or "")
            assert tokens.completion_token_ids is not None
            assert tokens.logprobs is not None
            assert len(tokens.logprobs) == len(tokens.completion_token_ids)
            assert tokens.prompt_token_ids is not None
        else:
            assert tokens.token_source == "none"


@pytest.mark.parametrize("dialect", PROFILES)
async def test_a_first_request_cancelled_during_the_probe_leaves_the_others_waiting(
    dialect: EngineDialect,
) -> None:
    """The request that started the probe is cancelled while the probe is held: the one waiting
    behind it probes in its place, and goes out only once that probe has settled."""
    async with late_probe(dialect) as (engine, pool):
        prober, began = begin(pool.session("cancelled"))
        await began.wait()
        await engine.probing.wait()
        waiter, began = begin(pool.session("waiting"))
        await began.wait()
        prober.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await prober
        assert engine.probe_gate is not None
        engine.probe_gate.set()
        done = await waiter
    assert prober.cancelled()
    assert_settled_before_any_request(engine, dialect)
    assert len([e for e in engine.timeline if e == CHAT]) == 1
    assert done.tokens is not None
    assert done.tokens.server_profile == dialect
    assert done.tokens.faults == []
