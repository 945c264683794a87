"""The ``Grader`` interface: turn a finished sandbox into a ``Graded`` reward.

A grader may also say what its verifier printed and wrote (``VerifierOutput``): the episode
keeps it in its artifacts and reads the tests' reports from it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from envfarm.grading.verifier.verdict import VerifierOutput
from envfarm.models.trajectory import Reward
from envfarm.plan.models import VerifierPlan
from envfarm.sandbox.base import Sandbox


@dataclass(frozen=True)
class Graded:
    reward: Reward
    output: VerifierOutput | None = None


class Grader(ABC):
    @abstractmethod
    async def grade(self, sandbox: Sandbox, plan: VerifierPlan) -> Graded:
        """A valid reward, or raise ``GradingError`` (the reward is then invalid, never 0)."""
