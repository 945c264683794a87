"""A task's plan as the tests hand it to backends and grading (``envfarm.plan``).

``settings`` go over the environment's (``Settings.with_flags``); without an engine's facts a
runtime is taken as given. ``engine_plan`` asks the backend for its facts, as a run does.
"""

from __future__ import annotations

from typing import Any

from envfarm.plan.models import EpisodePlan, SandboxSpec, VerifierPlan
from envfarm.plan.planner import plan_episode
from envfarm.sandbox.base import SandboxBackend
from envfarm.settings import current
from envfarm.spec.task import Task


def task_plan(task: Task, **settings: Any) -> EpisodePlan:
    return plan_episode(task, settings=current().with_flags(**settings))


def sandbox_spec(task: Task, **settings: Any) -> SandboxSpec:
    return task_plan(task, **settings).sandbox


def verifier_plan(task: Task, **settings: Any) -> VerifierPlan:
    return task_plan(task, **settings).verifier


async def engine_plan(backend: SandboxBackend, task: Task, **settings: Any) -> EpisodePlan:
    chosen = current().with_flags(**settings)
    return plan_episode(task, settings=chosen, facts=await backend.facts())
