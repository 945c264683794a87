"""Each error class of a model call, against the fake llama.cpp engine and the scripted server:
model faults stay data and are graded, request faults are never scored, endpoint faults are
retried and counted against the endpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envfarm.controller.episode import EpisodeRequest, EpisodeRunner
from envfarm.controller.job import Job, request_for
from envfarm.controller.policies import ResolvedPolicy
from envfarm.errors import PolicyError, RequestRejected
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.models.token_layout import full_prompts
from envfarm.models.trajectory import Trajectory
from envfarm.policy import CaptureOptions, EndpointSpec, PolicyServer, PoolSettings, Reply
from envfarm.policy.base import SamplingParams
from envfarm.policy.pool import EndpointPool
from envfarm.sandbox.base import ExecResult
from envfarm.testing.fake_engine import PARSE_ERROR, FakeEngine
from envfarm.testing.fake_sandbox import FakeBackend, ok
from envfarm.testing.scripted import ScriptedResponder, Step, completion, tool_call
from tests.plans import sandbox_spec
from tests.unit.test_context_budget import make_task
from tests.unit.test_llamacpp_and_token_mode import pool_on, run_agent

FAST = PoolSettings(max_retries=3, backoff_base_s=0.0, backoff_max_s=0.0, cooldown_s=60)
LONG_WRITE = tool_call("write_file", {"path": "/app/big.py", "content": "print('hello')\n" * 20})


@pytest.mark.parametrize("token_mode", [False, True])
async def test_a_tool_call_cut_at_max_tokens_is_graded_and_costs_no_attempt(
    token_mode: bool,
) -> None:
    steps: list[Step] = [LONG_WRITE, tool_call("submit", {})]
    async with (
        FakeEngine(steps) as engine,
        pool_on(engine, token_mode=token_mode) as pool,
    ):
        run = await run_agent(pool.session("e"), max_tokens=100)
        status = pool.status()[0]
    first = run.turns[0]
    assert first.finish_reason == "length"
    assert run.outcome.stop_reason == "submitted"
    assert run.outcome.malformed_tool_calls == 1
    result = first.tool_results[0]
    assert result.name == "write_file"
    assert result.error is not None
    assert result.sent_arguments == "{}"
    assert result.arguments.startswith('{\n    "path": "/app/big.py"')  # verbatim, cut
    with pytest.raises(json.JSONDecodeError, match="Unterminated string"):
        json.loads(result.arguments)
    assert [t.attempts for t in run.turns] == [1, 1]
    assert status.state == "closed"
    assert status.consecutive_failures == 0
    if not token_mode:  # the history sent back carried {} in place of the cut arguments
        chats = [body for path, body in engine.requests if path == "/v1/chat/completions"]
        history = chats[-1]["messages"]
        sent = next(m for m in history if m.get("tool_calls"))
        assert sent["tool_calls"][0]["function"]["arguments"] == "{}"


async def test_an_unsanitized_history_is_a_500_from_the_parser_and_rejected_twice() -> None:
    """What llama.cpp does with a history whose arguments are not JSON, and how it is taken:
    sent once more, then ``request_rejected``, and the endpoint stays in."""
    bad: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "bash", "arguments": '{"co'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "error"},
    ]
    async with FakeEngine([tool_call("submit", {})]) as engine, pool_on(engine) as pool:
        with pytest.raises(RequestRejected) as caught:
            await pool.complete(bad, [], SamplingParams(), session="e")
        status = pool.status()[0]
    chats = [b for p, b in engine.requests if p == "/v1/chat/completions"]
    assert len(chats) == 2
    assert PARSE_ERROR[:30] in str(caught.value)
    assert str(caught.value).startswith("request_rejected:")
    assert caught.value.infrastructure
    assert not caught.value.retryable
    assert status.state == "closed"
    assert status.consecutive_failures == 0


async def test_a_context_length_400_ends_the_session_with_context_length() -> None:
    steps: list[Step] = [tool_call("bash", {"command": "cat big"})] * 5
    async with FakeEngine(steps, n_ctx=2100) as engine, pool_on(engine) as pool:
        run = await run_agent(pool.session("e"))
        status = pool.status()[0]
    assert run.outcome.stop_reason == "context_length"
    assert 0 < len(run.turns) < 5
    assert status.consecutive_failures == 0


@pytest.mark.parametrize("token_mode", [False, True])
async def test_context_length_in_token_mode_too(token_mode: bool) -> None:
    steps: list[Step] = [tool_call("bash", {"command": "cat big"})] * 5
    async with (
        FakeEngine(steps, n_ctx=2100) as engine,
        pool_on(engine, token_mode=token_mode) as pool,
    ):
        run = await run_agent(pool.session("e"))
    assert run.outcome.stop_reason == "context_length"


async def test_a_server_500_stays_an_endpoint_fault() -> None:
    """A 500 that is not the request parser's is retried and counts against the breaker."""
    crash = Reply(status=500, body={"error": {"code": 500, "message": "CUDA error"}})
    responder = ScriptedResponder([crash, crash, tool_call("submit", {})])
    async with PolicyServer(responder) as server:
        pool = EndpointPool(
            [EndpointSpec(url=server.base_url)],
            "m",
            settings=FAST.model_copy(update={"breaker_failures": 5}),
            capture=CaptureOptions(profile="openai"),
        )
        async with pool:
            done = await pool.complete([{"role": "user", "content": "x"}], [], SamplingParams())
            assert pool.status()[0].state == "closed"
    assert done.attempts == 3
    assert [r.kind for r in done.retries] == ["error", "error"]


async def test_a_500_storm_ejects_and_fails_as_an_endpoint_fault_not_a_rejection() -> None:
    crash = Reply(status=500, body={"error": {"code": 500, "message": "CUDA error"}})
    responder = ScriptedResponder([crash] * 10)
    async with PolicyServer(responder) as server:
        pool = EndpointPool(
            [EndpointSpec(url=server.base_url)],
            "m",
            settings=FAST.model_copy(update={"breaker_failures": 2, "down_budget_s": 0.0}),
            capture=CaptureOptions(profile="openai"),
        )
        async with pool:
            with pytest.raises(PolicyError) as caught:
                await pool.complete([{"role": "user", "content": "x"}], [], SamplingParams())
            assert pool.status()[0].state != "closed"
    assert not isinstance(caught.value, RequestRejected)
    assert caught.value.retryable


async def test_a_weight_swap_503_stays_a_pause_in_token_mode() -> None:
    swap = Reply(status=503, body=b"swapping weights", headers={"Retry-After": "0"})
    steps: list[Step] = [completion(None, tool_call("submit", {}))]
    async with (
        FakeEngine(steps, faults=[swap, swap]) as engine,
        pool_on(engine, token_mode=True) as pool,
    ):
        run = await run_agent(pool.session("e"))
        status = pool.status()[0]
    assert run.outcome.stop_reason == "submitted"
    assert run.turns[0].attempts == 3
    assert status.consecutive_failures == 0


async def episode(
    tmp_path: Path, engine: FakeEngine, max_tokens: int | None = None, token_mode: bool = False
) -> Trajectory:
    task = make_task(tmp_path / "t", None)
    backend = FakeBackend()

    def handler(command: str) -> ExecResult:
        if "/tests/test.sh" in command:
            backend.created[-1].files["/logs/verifier/reward.txt"] = b"1\n"
        return ok()

    backend.handler = handler
    async with pool_on(engine, token_mode=token_mode) as pool:
        runner = EpisodeRunner(
            backend=backend,
            policy=ResolvedPolicy(pool, "fake", "m", needs_solution=False),
            grader=TestScriptGrader(),
            run_id="faults",
            sampling=SamplingParams(max_tokens=max_tokens),
        )
        image = await backend.prepare(sandbox_spec(task))
        request = EpisodeRequest(task=task, image=image, job_id="j", group_id="g", episode_id="e")
        return await runner.run(request)


async def test_a_request_rejected_twice_makes_the_episode_invalid_and_not_retryable(
    tmp_path: Path,
) -> None:
    bad = Reply(status=400, body={"error": {"code": 400, "message": "Invalid 'tools'"}})
    async with FakeEngine([tool_call("submit", {})], faults=[bad, bad]) as engine:
        trajectory = await episode(tmp_path, engine)
    assert trajectory.error is not None
    assert trajectory.error.type == "RequestRejected"
    assert trajectory.error.infrastructure
    assert not trajectory.error.retryable
    assert not trajectory.reward.valid
    assert trajectory.reward.value is None
    assert "request_rejected" in (trajectory.reward.reason or "")


@pytest.mark.parametrize("token_mode", [False, True])
async def test_a_rejected_request_keeps_the_turns_sampled_before_it(
    tmp_path: Path, token_mode: bool
) -> None:
    """Two turns, then the server rejects the third request twice: the stored trajectory keeps
    both turns with their token data and the history up to the rejected request, unscored."""
    bad = Reply(status=400, body={"error": {"code": 400, "message": "Invalid 'messages'"}})
    steps: list[Step] = [
        tool_call("bash", {"command": "ls"}),
        completion("Now the tests.", tool_call("bash", {"command": "pytest -q"})),
        bad,
        bad,
    ]
    async with FakeEngine(steps) as engine:
        trajectory = await episode(tmp_path, engine, token_mode=token_mode)
    assert trajectory.error is not None
    assert trajectory.error.type == "RequestRejected"
    assert not trajectory.error.retryable
    assert not trajectory.reward.valid
    assert trajectory.reward.value is None
    assert "request_rejected" in (trajectory.reward.reason or "")
    assert len(engine.prompts) == 4  # two answers, the rejected request and its one resend
    assert [t.index for t in trajectory.turns] == [0, 1]
    for turn, prompt in zip(trajectory.turns, full_prompts(trajectory.turns), strict=True):
        assert turn.faults == []
        assert prompt is not None
        assert turn.completion_token_ids is not None
        assert turn.logprobs is not None
        assert len(turn.completion_token_ids) == len(turn.logprobs)
    assert list(full_prompts(trajectory.turns)) == engine.prompts[:2]
    assert [[r.name for r in t.tool_results] for t in trajectory.turns] == [["bash"], ["bash"]]
    assert [m["role"] for m in trajectory.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    assert trajectory.outcome is not None
    assert trajectory.outcome.stop_reason == "error"
    assert trajectory.outcome.turns == 2


async def test_a_truncated_call_and_a_context_limit_are_graded_episodes(tmp_path: Path) -> None:
    steps: list[Step] = [LONG_WRITE, tool_call("bash", {"command": "ls"})]
    async with FakeEngine(steps, n_ctx=2100) as engine:
        trajectory = await episode(tmp_path, engine, max_tokens=100)
    assert trajectory.error is None
    assert trajectory.outcome is not None
    assert trajectory.outcome.stop_reason == "context_length"
    assert trajectory.outcome.malformed_tool_calls == 1
    assert trajectory.reward.valid
    assert trajectory.reward.value == 1.0


async def job_of_one(
    tmp_path: Path, engine: FakeEngine, *, max_tokens: int | None = None, token_mode: bool = False
) -> tuple[Trajectory, int]:
    """One episode run as a job with two retries allowed: its trajectory, and how many
    sandboxes (attempts) it took."""
    task = make_task(tmp_path / "t", None)
    backend = FakeBackend()

    def handler(command: str) -> ExecResult:
        if "/tests/test.sh" in command:
            backend.created[-1].files["/logs/verifier/reward.txt"] = b"1\n"
        return ok()

    backend.handler = handler
    async with pool_on(engine, token_mode=token_mode) as pool:
        runner = EpisodeRunner(
            backend=backend,
            policy=ResolvedPolicy(pool, "fake", "m", needs_solution=False),
            grader=TestScriptGrader(),
            run_id="faults",
            sampling=SamplingParams(max_tokens=max_tokens),
        )
        result = await Job([task], runner, request_for([task], runner, max_retries=2)).run()
        assert pool.status()[0].state == "closed"
        assert pool.status()[0].consecutive_failures == 0
    [trajectory] = result.trajectories
    return trajectory, len(backend.created)


@pytest.mark.parametrize("token_mode", [False, True])
async def test_in_a_job_a_truncated_call_is_graded_in_its_first_attempt(
    tmp_path: Path, token_mode: bool
) -> None:
    steps: list[Step] = [LONG_WRITE, tool_call("submit", {})]
    async with FakeEngine(steps) as engine:
        trajectory, attempts = await job_of_one(
            tmp_path, engine, max_tokens=100, token_mode=token_mode
        )
    assert attempts == 1
    assert trajectory.attempt == 0
    assert trajectory.error is None
    assert trajectory.reward.valid
    assert trajectory.reward.value == 1.0
    assert trajectory.outcome is not None
    assert trajectory.outcome.malformed_tool_calls == 1
    assert trajectory.turns[0].finish_reason == "length"
    assert trajectory.outcome.stop_reason == "submitted"
    assert len(engine.prompts) == 2  # no request was sent twice


async def test_in_a_job_a_rejected_request_is_not_retried(tmp_path: Path) -> None:
    bad = Reply(status=400, body={"error": {"code": 400, "message": "Invalid 'messages'"}})
    steps: list[Step] = [tool_call("bash", {"command": "ls"}), bad, bad]
    async with FakeEngine(steps) as engine:
        trajectory, attempts = await job_of_one(tmp_path, engine)
    assert attempts == 1
    assert trajectory.attempt == 0
    assert trajectory.error is not None
    assert trajectory.error.type == "RequestRejected"
    assert not trajectory.reward.valid
    assert len(trajectory.turns) == 1


async def test_in_a_job_a_context_limit_is_graded_in_its_first_attempt(tmp_path: Path) -> None:
    steps: list[Step] = [tool_call("bash", {"command": "cat big"})] * 5
    async with FakeEngine(steps, n_ctx=2100) as engine:
        trajectory, attempts = await job_of_one(tmp_path, engine)
    assert attempts == 1
    assert trajectory.error is None
    assert trajectory.outcome is not None
    assert trajectory.outcome.stop_reason == "context_length"
    assert trajectory.reward.valid
