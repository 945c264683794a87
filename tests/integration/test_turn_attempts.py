"""Per-turn ``attempts`` and ``paused_s`` through weight-swap storms, via the real agent loop."""

from __future__ import annotations

from typing import Any

import pytest

from envfarm.agent.loop import Agent, AgentLimits, AgentRun
from envfarm.agent.tools import ToolContext
from envfarm.policy import (
    CaptureOptions,
    EndpointPool,
    OpenAIPolicy,
    PolicyServer,
    SamplingParams,
    error_reply,
)
from envfarm.policy.base import PolicyClient
from envfarm.policy.endpoints import EndpointSpec, PoolSettings
from envfarm.testing.fake_sandbox import FakeSandbox
from envfarm.testing.fake_vllm import FakeVLLM, Fault
from envfarm.testing.scripted import FaultyResponder

RETRY_AFTER_S = 0.01
STORM = 5


def storm() -> dict[int, Fault | Any]:
    """Requests 0-4 are 503s (turn 0), request 6 a 429 (turn 1), request 9 an abort (turn 3)."""
    paused = Fault(kind="unavailable", retry_after_s=RETRY_AFTER_S)
    faults: dict[int, Fault | Any] = dict.fromkeys(range(STORM), paused)
    faults[6] = Fault(kind="rate_limited", retry_after_s=RETRY_AFTER_S)
    faults[9] = "abort"
    return faults


async def drive(client: PolicyClient) -> AgentRun:
    sandbox = FakeSandbox()
    await sandbox.start()
    agent = Agent(
        client,
        sandbox,
        limits=AgentLimits(max_turns=10),
        tools=ToolContext(workdir="/app"),
        sampling=SamplingParams(),
    )
    return await agent.run("Run the commands, then submit.")


async def test_pool_turns_record_attempts_and_pauses_through_a_503_storm() -> None:
    fake = FakeVLLM(commands=["ls", "pwd", "true"], faults=storm())
    settings = PoolSettings(pause_backoff_base_s=0.001, pause_backoff_max_s=0.02)
    async with PolicyServer(fake) as server:
        pool = EndpointPool(
            [EndpointSpec(url=server.base_url)],
            "m",
            settings=settings,
            capture=CaptureOptions(profile="vllm"),
        )
        async with pool:
            run = await drive(pool.session("episode"))
    assert run.outcome.stop_reason == "submitted"
    assert [t.attempts for t in run.turns] == [STORM + 1, 2, 1, 2]
    first, second, third, fourth = run.turns
    assert first.paused_s >= STORM * RETRY_AFTER_S
    assert second.paused_s >= RETRY_AFTER_S
    assert third.paused_s == 0.0
    assert fourth.paused_s > 0  # the aborted generation's time and the backoff after it
    assert fourth.finish_reason == "tool_calls"  # the resent request, not the aborted one
    assert len(fake.requests) == 11


async def test_single_client_turns_record_attempts_and_pauses_through_a_503_storm() -> None:
    faults = {i: f for i, f in storm().items() if i != 9}  # a lone client does not resend aborts
    fake = FakeVLLM(commands=["ls", "pwd"], faults=faults)
    async with (
        PolicyServer(fake) as server,
        OpenAIPolicy(server.base_url, "m", max_retries=STORM, backoff_max_s=1.0) as client,
    ):
        run = await drive(client)
    assert run.outcome.stop_reason == "submitted"
    assert [t.attempts for t in run.turns] == [STORM + 1, 2, 1]
    assert run.turns[0].paused_s >= STORM * RETRY_AFTER_S
    assert run.turns[1].paused_s >= RETRY_AFTER_S
    assert run.turns[2].paused_s == 0.0


async def test_a_server_error_is_an_attempt_but_not_a_pause() -> None:
    fake = FakeVLLM(commands=["ls"])
    failing = FaultyResponder(fake, [error_reply(502, "bad gateway", type="server_error")])
    async with (
        PolicyServer(failing) as server,
        OpenAIPolicy(server.base_url, "m", backoff_base_s=0.001, backoff_max_s=0.01) as client,
    ):
        run = await drive(client)
    assert [t.attempts for t in run.turns] == [2, 1]
    assert run.turns[0].paused_s == 0.0


@pytest.mark.parametrize("kind", ["unavailable", "rate_limited"])
async def test_pause_statuses_are_recorded_as_pauses(kind: Any) -> None:
    fake = FakeVLLM(commands=[], faults={0: Fault(kind=kind, retry_after_s=RETRY_AFTER_S)})
    async with (
        PolicyServer(fake) as server,
        OpenAIPolicy(server.base_url, "m") as client,
    ):
        result = await client.complete([{"role": "user", "content": "hi"}], [], SamplingParams())
    assert [r.kind for r in result.retries] == ["pause"]
    assert result.paused_s == pytest.approx(result.retries[0].delay_s + result.retries[0].elapsed_s)
