"""One trajectory as the viewer's lists need it: a few fields, read without parsing the line.

A line of ``trajectories.jsonl`` can be megabytes (messages, token ids), but lists, filters and
charts need only its identity (the head, before ``messages``) and its verdict (the tail, from
``reward`` on). Both are plain JSON objects once cut out of the line: inside a JSON string every
quote is escaped, so ``,"messages":`` and ``"reward":{"value":`` can only be keys, and the field
order of ``envfarm.trajectory/1`` puts every large field between them. A line written in another
order (by another tool) is parsed whole instead; the result is the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

HEAD_END = b',"messages":'
TAIL_START = b'"reward":{"value":'
PHASES = ("build_s", "provision_s", "agent_s", "grading_s", "teardown_s")


class NotATrajectory(ValueError):
    """The line is JSON but not an ``envfarm.trajectory/1`` object."""


@dataclass
class Entry:
    """What the lists show of one trajectory, and where to find the whole of it."""

    trajectory_id: str
    episode_id: str
    group_id: str
    task_id: str
    attempt: int
    value: float | None
    valid: bool
    flags: list[str]
    reason: str | None
    advantage: float | None
    zero_variance: bool | None
    stop_reason: str | None
    turns: int
    error_type: str | None
    infrastructure: bool
    timings: dict[str, float | None]
    """As in the trajectory: seconds per phase, null for a phase that did not run."""
    policy_version: str | None
    artifacts: str | None
    locator: Any = field(default=None, repr=False)
    """Where the whole trajectory is: a byte range of the file, or a group cursor."""

    @property
    def outcome(self) -> str:
        """One word for the filter: ``invalid``, ``error``, else the agent's stop reason."""
        if not self.valid:
            return "invalid"
        return self.stop_reason or "unknown"

    @property
    def passed(self) -> bool:
        return self.valid and self.value is not None and self.value >= 1.0


def entry_of_line(line: bytes, locator: Any = None) -> Entry:
    """The entry of one JSON line; ``ValueError`` when it is not JSON, ``NotATrajectory`` when
    it is not a trajectory."""
    fields = _fast_fields(line)
    if fields is None:
        document = json.loads(line)
        if not isinstance(document, dict):
            raise NotATrajectory("the line is not a JSON object")
        fields = document
    return entry_of(fields, locator)


def entry_of(document: dict[str, Any], locator: Any = None) -> Entry:
    try:
        reward = document.get("reward") or {}
        outcome = document.get("outcome") or {}
        error = document.get("error") or {}
        timings = document.get("timings") or {}
        versions = document.get("policy_versions") or {}
        return Entry(
            trajectory_id=str(document["trajectory_id"]),
            episode_id=str(document.get("episode_id") or document["trajectory_id"]),
            group_id=str(document.get("group_id") or ""),
            task_id=str(document.get("task_id") or "?"),
            attempt=int(document.get("attempt") or 0),
            value=_number(reward.get("value")),
            valid=bool(reward.get("valid")),
            flags=[str(f) for f in reward.get("flags") or []],
            reason=reward.get("reason"),
            advantage=_number(document.get("advantage")),
            zero_variance=document.get("group_zero_variance"),
            stop_reason=outcome.get("stop_reason"),
            turns=int(outcome.get("turns") or 0),
            error_type=error.get("type"),
            infrastructure=bool(error.get("infrastructure", False)) if error else False,
            timings=timings if isinstance(timings, dict) else {},
            policy_version=versions.get("max"),
            artifacts=document.get("artifacts"),
            locator=locator,
        )
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise NotATrajectory(f"not an envfarm trajectory ({type(exc).__name__}: {exc})") from exc


def _fast_fields(line: bytes) -> dict[str, Any] | None:
    head_end = line.find(HEAD_END)
    tail_start = line.rfind(TAIL_START)
    if head_end < 0 or tail_start < head_end:
        return None
    try:
        fields = json.loads(line[:head_end] + b"," + line[tail_start:])
    except ValueError:
        return None
    if not isinstance(fields, dict) or "trajectory_id" not in fields or "provenance" not in fields:
        return None
    return fields


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
