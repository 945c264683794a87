"""The tasks ``envfarm run`` refuses before its job starts (each a bad input, with its reason):
MCP servers the installed agent cannot use, rubric items without a judge."""

from __future__ import annotations

import sys

from rich.markup import escape

from envfarm.agent.specs import AgentSpec
from envfarm.cli.render import console
from envfarm.controller.summary import EXIT_BAD_INPUT
from envfarm.models.jobs import JudgeRequest
from envfarm.spec.task import Task


def triage_mcp_tasks(tasks: list[Task], agent: AgentSpec, bad_inputs: dict[str, str]) -> list[Task]:
    """Tasks whose MCP servers or skills the installed agent cannot use are refused, as Harbor
    does."""
    runnable = []
    for task in tasks:
        environment = task.config.environment
        refusal = agent.refusal(environment.mcp_servers, environment.skills_dir)
        if refusal is None:
            runnable.append(task)
            continue
        bad_inputs[task.id] = refusal
        console.print(f"[yellow]not run:[/] {escape(task.id)}: {escape(refusal)}")
    if tasks and not runnable:
        console.print("[red]no runnable task found[/]")
        sys.exit(EXIT_BAD_INPUT)
    return runnable


def triage_rubric_tasks(
    tasks: list[Task],
    judge: JudgeRequest | None,
    allow_unjudged: bool,
    bad_inputs: dict[str, str],
) -> list[Task]:
    """Without a judge, rubric tasks run by their tests alone when allowed, else are refused."""
    unjudged = [task for task in tasks if task.config.verifier.rubrics] if judge is None else []
    if not unjudged:
        return tasks
    names = ", ".join(task.id for task in unjudged)
    if allow_unjudged:
        console.print(
            f"[cyan]notice:[/] no --judge: the rubric items of {names} are not judged; these "
            "tasks are graded by their tests alone and flagged rubric:unjudged."
        )
        return tasks
    for task in unjudged:
        bad_inputs[task.id] = (
            "the task has rubric items and no --judge was given: pass --judge URL, or "
            "--allow-unjudged to grade it by its tests alone"
        )
        console.print(f"[yellow]not run:[/] {escape(task.id)}: {escape(bad_inputs[task.id])}")
    runnable = [task for task in tasks if not task.config.verifier.rubrics]
    if not runnable:
        console.print("[red]no runnable task found[/]")
        sys.exit(EXIT_BAD_INPUT)
    return runnable
