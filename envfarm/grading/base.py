"""The ``Grader`` interface: turn a finished sandbox into a ``Reward``."""

from __future__ import annotations

from abc import ABC, abstractmethod

from envfarm.models.trajectory import Reward
from envfarm.sandbox.base import Sandbox
from envfarm.spec.task import Task


class Grader(ABC):
    @abstractmethod
    async def grade(self, sandbox: Sandbox, task: Task) -> Reward:
        """A valid reward, or raise ``GradingError`` (the reward is then invalid, never 0)."""
