"""An episode's phases: each timed into ``trajectory.timings``, and a failure in one turned
into the trajectory's ``error`` with the phase it happened in (``error_info``), so that the
episode ends with a reason instead of raising. An infrastructure fault leaves the reward
invalid, never 0; an error outside envfarm's tree counts as one.
"""

from __future__ import annotations

import time
import traceback
from typing import Literal

from envfarm.errors import EnvfarmError
from envfarm.models.trajectory import ErrorInfo, Reward, Trajectory

Phase = Literal["build", "provision", "agent", "grading", "teardown"]

_TIMING_FIELDS: dict[Phase, str] = {
    "build": "build_s",
    "provision": "provision_s",
    "agent": "agent_s",
    "grading": "grading_s",
    "teardown": "teardown_s",
}


class phase:
    """Time a phase into ``trajectory.timings`` and turn its failure into ``trajectory.error``."""

    def __init__(self, trajectory: Trajectory, name: Phase) -> None:
        self.trajectory, self.name = trajectory, name

    def __enter__(self) -> None:
        self.started = time.monotonic()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, _: object
    ) -> bool:
        setattr(self.trajectory.timings, _TIMING_FIELDS[self.name], time.monotonic() - self.started)
        if exc is None or not isinstance(exc, Exception):
            return False
        if self.trajectory.error is None:
            self.trajectory.error = error_info(exc, self.name)
            self.trajectory.reward = Reward(reason=f"{self.name} failed: {exc}")
        return True


def error_info(exc: BaseException | None, phase: Phase) -> ErrorInfo:
    if exc is None:
        return ErrorInfo(type="UnknownError", message="unknown failure", phase=phase)
    infrastructure = exc.infrastructure if isinstance(exc, EnvfarmError) else True
    retryable = exc.retryable if isinstance(exc, EnvfarmError) else False
    message = str(exc) or type(exc).__name__
    if not isinstance(exc, EnvfarmError):
        message = "".join(traceback.format_exception_only(exc)).strip()
    return ErrorInfo(
        type=type(exc).__name__,
        message=message,
        phase=phase,
        infrastructure=infrastructure,
        retryable=retryable,
    )
