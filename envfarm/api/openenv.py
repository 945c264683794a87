"""The step API: envfarm's environments for trainers that run the loop, on OpenEnv's wire.

OpenEnv's clients (``openenv-core``'s ``EnvClient``/``GenericEnvClient`` in its default
"simulation" mode, and what TRL and SkyRL build on it) open a WebSocket at their base URL plus
``/ws`` and exchange JSON messages: ``{"type": "reset"|"step"|"state"|"close", "data": ...}``
answered by ``{"type": "observation", "data": {"observation", "reward", "done"}}``, ``{"type":
"state", ...}`` or ``{"type": "error", "data": {"message", "code"}}``. One connection is one
environment; each ``reset`` starts a new episode (``controller/sessions.py``).

- ``reset``: ``{"task": NAME, "seed": N, "model": NAME}``; ``task`` may be left out when the
  server has one task. The observation holds the instruction and the tool schemas.
- ``step``: ``{"tool": NAME, "arguments": {...}}`` with the built-in loop's tools (and the
  task's MCP tools). ``submit`` (or a turn or time limit) ends the episode: ``done`` with the
  graded reward (null when invalid, with the reason).
- ``close``, a closed connection, or no message for ``idle_s``: the episode is abandoned.

The token is the path segment before ``/ws`` (``/v1/openenv/TOKEN/ws``), because OpenEnv's
client sends no headers; a bearer header works too. ``api/guards.py`` checks either, in constant
time, and cuts the segment out before anything routes or logs the path.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from fastapi import APIRouter, Request, WebSocket, WebSocketDisconnect
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envfarm.agent.tools import tool_schemas
from envfarm.controller.sessions import Session, Sessions, Step
from envfarm.errors import EnvfarmError, SessionCapacity, SessionEnded, UnknownTask
from envfarm.models.trajectory import Trajectory

router = APIRouter(prefix="/v1/openenv", tags=["step API (OpenEnv)"])
DEFAULT_IDLE_S = 600.0


class ResetData(BaseModel):
    model_config = ConfigDict(extra="ignore")  # OpenEnv's clients may add episode_id
    task: str | None = None
    seed: int | None = Field(default=None, ge=0)
    model: str | None = Field(default=None, max_length=200)
    """The trainer's model, recorded as the trajectory's ``model``."""


class Action(BaseModel):
    model_config = ConfigDict(extra="ignore")  # OpenEnv's Action base carries ``metadata``
    tool: str = Field(min_length=1)
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class _Connection:
    """One WebSocket: at most one session at a time."""

    def __init__(self, sessions: Sessions | None) -> None:
        self.sessions = sessions
        self.session: Session | None = None

    async def handle(self, kind: str, data: Any) -> dict[str, Any] | None:
        if kind == "reset":
            return await self._reset(ResetData.model_validate(data or {}))
        if kind == "step":
            return await self._step(Action.model_validate(data))
        if kind == "state":
            state = self.session.state() if self.session else {"episode_id": None, "step_count": 0}
            return {"type": "state", "data": state}
        if kind == "close":
            return None
        return _error(f"unknown message type {kind!r}: expected reset, step, state or close",
                      "UNKNOWN_TYPE")  # fmt: skip

    async def _reset(self, data: ResetData) -> dict[str, Any]:
        if self.sessions is None:
            return _error(
                "this server runs no episodes (started without a worker)", "SESSION_ERROR"
            )
        await self.abandon("reset before submit")
        self.session = await self.sessions.open(data.task, seed=data.seed, model=data.model)
        opening = self.session.opening
        observation = {
            "instruction": opening.instruction,
            "tools": opening.tools,
            "task": self.session.task.id,
            "episode_id": self.session.episode_id,
            "job_id": self.session.job_id,
        }
        return _observation(observation, None, False)

    async def _step(self, action: Action) -> dict[str, Any]:
        if self.session is None:
            raise SessionEnded("no session: send reset first")
        step = await self.session.step(action.tool, action.arguments)
        return _step_observation(step)

    async def abandon(self, reason: str) -> None:
        if self.session is not None and self.session.trajectory is None:
            with contextlib.suppress(EnvfarmError):
                await self.session.abandon(reason)


@router.websocket("/ws")
async def openenv_ws(websocket: WebSocket) -> None:
    """One OpenEnv session per connection (see the module docstring for the messages)."""
    await websocket.accept()
    connection = _Connection(websocket.app.state.sessions)
    idle_s: float = websocket.app.state.session_idle_s
    try:
        while True:
            try:
                async with asyncio.timeout(idle_s):
                    raw = await websocket.receive_text()
            except TimeoutError:
                await connection.abandon(f"idle for {idle_s:g} s")
                await websocket.send_json(_error(f"idle for {idle_s:g} s: the session was "
                                                 "abandoned", "SESSION_ERROR"))  # fmt: skip
                await websocket.close(code=1001)
                return
            answer = await _answer(connection, raw)
            if answer is None:
                await connection.abandon("closed before submit")
                await websocket.close()
                return
            await websocket.send_json(answer)
    except WebSocketDisconnect:
        await connection.abandon("the connection closed before submit")
    finally:
        await asyncio.shield(connection.abandon("the server closed the connection"))


async def _answer(connection: _Connection, raw: str) -> dict[str, Any] | None:
    try:
        message = json.loads(raw)
    except json.JSONDecodeError as exc:
        return _error(f"the message is not JSON: {exc}", "INVALID_JSON")
    if not isinstance(message, dict):
        return _error("a message is a JSON object with `type` and `data`", "INVALID_JSON")
    try:
        return await connection.handle(str(message.get("type", "")), message.get("data"))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'data'}: {e['msg']}" for e in exc.errors()
        )
        return _error(f"bad {message.get('type')} data: {problems}", "VALIDATION_ERROR")
    except SessionCapacity as exc:
        return _error(str(exc), "CAPACITY_REACHED")
    except UnknownTask as exc:
        return _error(str(exc), "VALIDATION_ERROR")
    except EnvfarmError as exc:
        return _error(str(exc), "EXECUTION_ERROR")


def _step_observation(step: Step) -> dict[str, Any]:
    result = step.result
    observation: dict[str, Any] = {
        "tool": result.name,
        "output": result.output,
        "exit_code": result.exit_code,
        "error": result.error,
        "truncated": result.truncated,
    }
    if step.trajectory is None:
        return _observation(observation, None, False)
    observation.update(_ending(step.trajectory))
    return _observation(observation, step.trajectory.reward.value, True)


def _ending(trajectory: Trajectory) -> dict[str, Any]:
    reward = trajectory.reward
    return {
        "stop_reason": trajectory.outcome.stop_reason if trajectory.outcome else None,
        "reward_valid": reward.valid,
        "reason": reward.reason,
        "flags": reward.flags,
        "infrastructure_error": bool(trajectory.error and trajectory.error.infrastructure),
        "trajectory_id": trajectory.trajectory_id,
    }


def _observation(observation: dict[str, Any], reward: float | None, done: bool) -> dict[str, Any]:
    return {"type": "observation", "data": {"observation": observation, "reward": reward,
                                            "done": done}}  # fmt: skip


def _error(message: str, code: str) -> dict[str, Any]:
    return {"type": "error", "data": {"message": message, "code": code}}


@router.get("/health")
async def openenv_health(request: Request) -> dict[str, str]:
    """OpenEnv's health check: ``healthy`` when this server runs sessions."""
    return {"status": "healthy" if request.app.state.sessions is not None else "unavailable"}


@router.get("/schema")
async def openenv_schema() -> dict[str, Any]:
    """The shapes of an action, an observation and the state (OpenEnv's ``/schema``)."""
    return {
        "action": Action.model_json_schema(),
        "tools": tool_schemas(),
        "observation": {"type": "object", "description": "see docs/trainers.md"},
        "state": {"type": "object", "properties": {"episode_id": {"type": "string"},
                                                   "step_count": {"type": "integer"}}},
    }  # fmt: skip
