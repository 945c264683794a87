"""What one episode's grading noted and how long each part took (``Timings.phases``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class GradingLog:
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds spent in each part of grading."""
    notes: list[str] = field(default_factory=list)
    """What went otherwise than planned, kept with the artifacts."""

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.monotonic() - started

    def missing_tools(self, tools: list[str]) -> None:
        if tools:
            self.notes.append(f"snapshot tools missing: {', '.join(tools)}")
