"""The battery run inside each task's environment, during its agent phase.

An audit is a step-API session (``controller/sessions.py``): an ordinary episode of the task,
provisioned as ``envfarm run`` provisions it (the same plan, image, mounts, user, hardening and
helper), whose actions come from here rather than from a model. Each probe is one call of the
agent's own ``bash`` tool, with the probe's timeout, so a probe sees exactly what a model's
command would: the agent phase's mounts, user, working directory and environment.

When the battery is done the session is abandoned, not submitted: the episode is recorded
with ``SessionAbandoned`` and an invalid reward, in an in-memory store that ends with the
audit, and is never graded. Grading would upload the hidden tests and run the verifier for an
"agent" that did no work — time spent on a reward that means nothing — and the record is not
training data; abandonment is the step API's existing path for an episode that must never
reach a trainer. The job's turn limit is the battery's size, so the task's own limit cannot
end the phase (and start grading) mid-battery.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

from envfarm.audit.battery import Battery, load_battery
from envfarm.audit.report import AuditReport, TaskAudit, judge
from envfarm.controller.assembly import open_backend
from envfarm.controller.policies import DRIVEN_POLICY
from envfarm.controller.service import open_controller
from envfarm.controller.sessions import Session, Sessions, SessionStartError
from envfarm.controller.worker import WorkerConfig
from envfarm.errors import EnvfarmError
from envfarm.models.jobs import JobPolicy, JobRequest
from envfarm.settings import Realism, Settings, current
from envfarm.spec.task import Task, discover_tasks

IN_MEMORY = "sqlite://"
ABANDONED = "the audit's battery is done (an audit is never graded)"
TIMED_OUT = "[command timed out after"
"""How the ``bash`` tool's output says it killed a command (``agent/tools.py``)."""


def audit_request(task: Task, battery: Battery, realism: Realism | None) -> JobRequest:
    """The one request an audit's episode is made from: a driven one-episode job, never
    retried, whose turn limit outlasts the battery. ``realism``: the job's profile (None:
    the settings' default); a task's own ``[environment] realism`` wins, as in any job."""
    return JobRequest(
        tasks=[task.id],
        policy=JobPolicy(base_url=DRIVEN_POLICY),
        max_retries=0,
        max_turns=len(battery.probes) + 1,
        realism=realism,
        name=f"audit {task.id}",
    )


async def audit_tasks(
    tasks: Sequence[Task],
    battery: Battery | None = None,
    *,
    realism: Realism | None = None,
    settings: Settings | None = None,
    concurrency: int = 1,
    on_task: Callable[[TaskAudit], None] | None = None,
) -> AuditReport:
    """Run ``battery`` (default: the shipped one) in an environment of each task, up to
    ``concurrency`` at once; ``on_task`` hears of each task's audit as it ends."""
    battery = battery or load_battery()
    settings = settings or current()
    by_id = {task.id: task for task in tasks}
    report = AuditReport()
    limit = asyncio.Semaphore(concurrency)
    async with (
        open_backend(settings) as backend,
        open_controller(
            IN_MEMORY, by_id, backend=backend,
            worker=WorkerConfig(concurrency=concurrency), settings=settings,
        ) as controller,
    ):  # fmt: skip
        assert controller.worker is not None
        sessions = Sessions(controller.worker, by_id)

        async def one(task: Task) -> TaskAudit:
            async with limit:
                audit = await _audit(sessions, task, battery, realism)
            if on_task is not None:
                on_task(audit)
            return audit

        report.tasks = list(await asyncio.gather(*(one(task) for task in by_id.values())))
    return report.counted()


async def audit_task(
    task: Task | Path,
    battery: Battery | None = None,
    *,
    realism: Realism | None = None,
    settings: Settings | None = None,
) -> AuditReport:
    """One task's audit (a task directory is loaded first): for tests and scripts."""
    if isinstance(task, Path):
        found, errors = discover_tasks([task])
        if errors:
            raise errors[0]
        [task] = found
    return await audit_tasks([task], battery, realism=realism, settings=settings)


async def _audit(
    sessions: Sessions, task: Task, battery: Battery, realism: Realism | None
) -> TaskAudit:
    audit = TaskAudit(task=task.id, realism=realism)
    try:
        session = await sessions.start(task, audit_request(task, battery, realism))
    except SessionStartError as exc:
        audit.error = str(exc)
        return audit
    except EnvfarmError as exc:  # the task's image cannot be built, or it cannot run here
        audit.error, audit.bad_input = str(exc), not exc.infrastructure
        return audit
    audit.job_id, audit.episode_id = session.job_id, session.episode_id
    try:
        await _probe(session, battery, audit)
    finally:
        trajectory = await session.abandon(ABANDONED)
    if trajectory is not None:  # the profile the plan decided (a task's own wins)
        audit.realism = trajectory.provenance.realism
    return audit


async def _probe(session: Session, battery: Battery, audit: TaskAudit) -> None:
    for probe in battery.probes:
        if session.done or audit.error:
            audit.probes.append(judge(probe, "", None, "the agent phase ended before this probe"))
            continue
        arguments = {"command": probe.command, "timeout": probe.timeout_s}
        try:
            step = await session.step("bash", arguments)
        except EnvfarmError as exc:  # the sandbox failed: infrastructure, not the task's
            audit.error = f"the environment failed at probe {probe.id!r}: {exc}"
            audit.probes.append(judge(probe, "", None, str(exc)))
            continue
        result = step.result
        error = result.error
        if error is None and (result.exit_code is None or TIMED_OUT in result.output):
            error = f"timed out after {probe.timeout_s:g}s"
        judged = judge(probe, result.output, result.exit_code, error)
        judged.duration_s = result.duration_s
        audit.probes.append(judged)
