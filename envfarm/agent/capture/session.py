"""One installed agent's session with the policy: limits, forwarding, and what is recorded.

Every call the agent makes is forwarded through the job's policy client for this episode (the
endpoint pool's affinity, breaker, weight-swap pauses and versions all apply) and recorded as a
``Turn`` built exactly as the built-in loop builds one (``turn_from_completion``), so token ids,
logprobs, routed experts and the policy version are those the server sent. The job's sampling
parameters replace the agent's own (``max_tokens``: the smaller of the two), so a harness
cannot sample differently from what the trainer asked for.

Limits are the job's: turns, completion tokens in all, wall clock. A call past a limit is
answered with a clear error and ends the session (``stopped``): the runner then stops the agent
and grades what it left. A policy failure (every retry spent) is answered as a 503 and ends the
session too, recorded in ``policy_failure``: the episode is then an infrastructure fault, never
a graded one. A malformed request gets the error a real server gives and is recorded as a turn
whose ``faults`` say what was wrong.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from envfarm.agent.capture.requests import compact_request
from envfarm.agent.loop import turn_from_completion
from envfarm.errors import PolicyError
from envfarm.models.token_layout import PromptCompactor
from envfarm.models.trajectory import StopReason, Turn
from envfarm.policy.base import Completion, PolicyClient, SamplingParams

StopCause = Literal["max_turns", "max_tokens", "timeout", "policy_failure"]


class CaptureLimits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_turns: int = 50
    max_total_tokens: int | None = None
    """Completion tokens over the whole session; None: no limit."""
    timeout_s: float | None = None


class CaptureRefusal(Exception):
    """A call answered with an error instead of a completion: HTTP status and OpenAI body."""

    def __init__(self, status: int, message: str, kind: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.code = status, kind, code

    def body(self) -> dict[str, Any]:
        return {
            "error": {"message": str(self), "type": self.kind, "param": None, "code": self.code}
        }


class CaptureSession:
    def __init__(
        self,
        policy: PolicyClient,
        *,
        sampling: SamplingParams,
        limits: CaptureLimits,
    ) -> None:
        self.policy, self.sampling, self.limits = policy, sampling, limits
        self.turns: list[Turn] = []
        self.messages: list[dict[str, Any]] = []
        """The last request's messages as the agent sent them, then the reply it got."""
        self.requests: list[dict[str, Any]] = []
        """Every request body as received (the Responses and Messages APIs: before translation),
        each kept as its difference from the one before (``requests.compact_request``)."""
        self._previous_raw: dict[str, Any] | None = None
        self.stopped = asyncio.Event()
        self.stop_cause: StopCause | None = None
        self.policy_failure: PolicyError | None = None
        self.completion_tokens = 0
        self.started = time.monotonic()
        self.prompts = PromptCompactor()

    @property
    def stop_reason(self) -> StopReason | None:
        """The trajectory's stop reason when a limit ended the session."""
        if self.stop_cause in ("max_turns", "timeout"):
            return self.stop_cause
        return "max_turns" if self.stop_cause == "max_tokens" else None

    def record_raw(self, body: dict[str, Any]) -> None:
        self.requests.append(compact_request(body, self._previous_raw))
        self._previous_raw = body

    async def complete(self, body: Any) -> Completion:
        """Forward one chat-completions request body; raise ``CaptureRefusal`` to refuse it."""
        problem = _malformed(body)
        if problem is not None:
            self._record_fault(f"malformed request: {problem}")
            raise CaptureRefusal(400, problem, "invalid_request_error")
        self._check_limits()
        messages, tools = list(body["messages"]), list(body.get("tools") or [])
        try:
            remaining = None
            if self.limits.timeout_s is not None:
                remaining = max(self.limits.timeout_s - (time.monotonic() - self.started), 0.0)
            async with asyncio.timeout(remaining):
                completion = await self.policy.complete(messages, tools, self._sampling(body))
        except TimeoutError:
            raise self._stop("timeout", "the episode's time limit is reached") from None
        except PolicyError as exc:
            self.policy_failure = exc
            self._stop("policy_failure", "")
            raise CaptureRefusal(
                503, f"the model server failed: {exc}", "server_error", "policy_unavailable"
            ) from exc
        turn = turn_from_completion(completion, index=len(self.turns))
        self.prompts.add(turn)
        self.turns.append(turn)
        self.completion_tokens += len(turn.completion_token_ids or []) or (
            (completion.usage or {}).get("completion_tokens", 0)
        )
        self.messages = [*messages, completion.message]
        return completion

    def _sampling(self, body: dict[str, Any]) -> SamplingParams:
        update: dict[str, Any] = {}
        asked = body.get("max_completion_tokens") or body.get("max_tokens")
        if isinstance(asked, int) and asked > 0:
            job = self.sampling.max_tokens
            update["max_tokens"] = asked if job is None else min(asked, job)
        choice = body.get("tool_choice")
        if choice in ("auto", "none", "required") and body.get("tools"):
            update["tool_choice"] = choice
        return self.sampling.model_copy(update=update)

    def _check_limits(self) -> None:
        if self.stopped.is_set():
            raise self._refusal(self.stop_cause or "max_turns")
        if len(self.turns) >= self.limits.max_turns:
            raise self._stop("max_turns", f"the episode's turn limit ({self.limits.max_turns})")
        cap = self.limits.max_total_tokens
        if cap is not None and self.completion_tokens >= cap:
            raise self._stop("max_tokens", f"the episode's token limit ({cap})")
        timeout = self.limits.timeout_s
        if timeout is not None and time.monotonic() - self.started >= timeout:
            raise self._stop("timeout", f"the episode's time limit ({timeout:g} s)")

    def _stop(self, cause: StopCause, what: str) -> CaptureRefusal:
        if self.stop_cause is None:
            self.stop_cause = cause
            self._what = what
        self.stopped.set()
        return self._refusal(cause)

    def _refusal(self, cause: StopCause) -> CaptureRefusal:
        if cause == "policy_failure":
            return CaptureRefusal(503, "the model server failed", "server_error")
        what = getattr(self, "_what", "a limit")
        return CaptureRefusal(
            400,
            f"envfarm: {what} is reached; the session is over",
            "invalid_request_error",
            "envfarm_limit_reached",
        )

    def _record_fault(self, fault: str) -> None:
        turn = Turn(index=len(self.turns), faults=[fault])
        self.prompts.add(turn)
        self.turns.append(turn)


def _malformed(body: Any) -> str | None:
    """What a chat-completions server would reject in ``body``, or None."""
    if not isinstance(body, dict):
        return "the request body must be a JSON object"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' is a required property and must be a non-empty array"
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            return f"messages[{index}] must be an object with a 'role'"
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        return "'tools' must be an array"
    return None
