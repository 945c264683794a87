"""Running an installed agent (``specs.AgentSpec``) in the sandbox, its calls captured.

The capture endpoint (``capture``) is served by the sandbox's port relay as ``127.0.0.1:PORT``
inside the sandbox, in envfarm's process (no socket on envfarm's side), so the agent needs no
network and holds no key but a placeholder. The agent runs as the task's agent user in its
workdir, under the wall clock of the episode. It ends by itself (its exit code in
``done_exit_codes``: ``submitted``; another: ``error``, graded all the same, like a session
that produced nothing), or the capture session ends it: a limit (graded as
``max_turns``/``timeout``) or a policy failure, which is raised, so the episode is an
infrastructure fault and never scored.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from envfarm.agent.capture.server import CaptureServer
from envfarm.agent.capture.session import CaptureLimits, CaptureSession
from envfarm.agent.loop import AgentRun
from envfarm.agent.skills import copy_command
from envfarm.agent.specs import MCP_ENV, AgentSpec
from envfarm.errors import TaskSpecError
from envfarm.models.trajectory import AgentOutcome, StopReason
from envfarm.policy.base import PolicyClient, SamplingParams
from envfarm.sandbox.base import ExecResult, Sandbox
from envfarm.sandbox.forwarding import port_forwarding
from envfarm.spec.mcp import McpServer

MODEL_ALIAS = "policy"
"""The model name the agent is told; the capture endpoint answers for any."""
OUTPUT_KEPT = 8000


class InstalledRun(AgentRun):
    requests: list[dict[str, Any]] = []
    exit_code: int | None = None
    output_tail: str = ""


async def run_installed(
    spec: AgentSpec,
    policy: PolicyClient,
    sandbox: Sandbox,
    instruction: str,
    *,
    sampling: SamplingParams,
    limits: CaptureLimits,
    workdir: str,
    user: str | None,
    mcp_servers: list[McpServer] | None = None,
    skills_dir: str | None = None,
) -> InstalledRun:
    servers = mcp_servers or []
    refusal = spec.refusal(servers, skills_dir)
    if refusal is not None:
        field = "mcp_servers" if spec.mcp_refusal(servers) else "skills_dir"
        raise TaskSpecError(f"task.toml: environment.{field}", refusal)
    instruction = spec.agent_instruction(instruction, servers)
    session = CaptureSession(policy, sampling=sampling, limits=limits)
    async with CaptureServer(session, model=MODEL_ALIAS, listen=False) as server:
        forward = await port_forwarding(sandbox).serve_port(server.protocol)
        try:
            result = await _run(
                spec,
                session,
                sandbox,
                instruction,
                forward.port,
                workdir,
                user,
                (servers, skills_dir),
            )
        finally:
            await forward.aclose()
    if session.policy_failure is not None:
        raise session.policy_failure
    stop: StopReason
    if session.stop_reason is not None:
        stop = session.stop_reason
    elif result is None:
        stop = "timeout"
    else:
        stop = "submitted" if result.exit_code in spec.run.done_exit_codes else "error"
    output = "" if result is None else (result.stdout + result.stderr)[-OUTPUT_KEPT:]
    return InstalledRun(
        messages=session.messages,
        turns=session.turns,
        outcome=AgentOutcome(stop_reason=stop, turns=len(session.turns)),
        requests=session.requests,
        exit_code=None if result is None else result.exit_code,
        output_tail=output,
    )


async def _run(
    spec: AgentSpec,
    session: CaptureSession,
    sandbox: Sandbox,
    instruction: str,
    port: int,
    workdir: str,
    user: str | None,
    given: tuple[list[McpServer], str | None],
) -> ExecResult | None:
    """The agent's exec result, or None when the session's end stopped it first. ``given``:
    the task's MCP servers and skills directory."""
    servers, skills_dir = given
    declared = json.dumps([server.model_dump(exclude_defaults=True) for server in servers])
    values = {
        "instruction": instruction,
        "base_url": f"http://127.0.0.1:{port}/v1",
        "model": MODEL_ALIAS,
        "workdir": workdir,
        "mcp_servers": declared,
    }
    command = spec.fill(spec.run.command, **values)
    if skills_dir and spec.skills:
        command = f"{copy_command(skills_dir, spec.skills)} && {command}"
    env = {key: spec.fill(value, **values) for key, value in spec.run.env.items()}
    if servers:
        env.setdefault(MCP_ENV, declared)
    timeout = session.limits.timeout_s
    agent = asyncio.create_task(
        sandbox.exec(command, workdir=workdir, env=env, user=user, timeout=timeout)
    )
    ended = asyncio.create_task(session.stopped.wait())
    try:
        await asyncio.wait({agent, ended}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ended.cancel()
    if not agent.done():
        agent.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await agent
        return None
    result = agent.result()
    return None if result.timed_out else result
