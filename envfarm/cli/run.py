"""``envfarm run``: build, run and grade episodes on the local engine; write the results."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import datetime
from pathlib import Path

import click
from rich.markup import escape

from envfarm.agent.specs import resolve_agent
from envfarm.cli.options import command_settings
from envfarm.cli.render import JobProgress, console, summary_table
from envfarm.cli.resume import job_to_resume, load_manifest, resuming, save_manifest, store_url
from envfarm.cli.run_flags import run_flags
from envfarm.cli.triage import triage_mcp_tasks, triage_rubric_tasks
from envfarm.controller.assembly import open_backend, open_runner, policy_spec
from envfarm.controller.images import bad_input
from envfarm.controller.job import Job, JobEvents
from envfarm.controller.policies import policy_fields
from envfarm.controller.summary import EXIT_BAD_INPUT, RunSummary, summarize
from envfarm.controller.worker import WorkerConfig
from envfarm.errors import EnvfarmError, TaskSpecError
from envfarm.models.jobs import (
    JobPolicy,
    JobRequest,
    JudgeRequest,
    Sampling,
    without_keys,
)
from envfarm.models.samples import samples_report
from envfarm.models.trajectory import Trajectory
from envfarm.sandbox.base import PreparedImage
from envfarm.sandbox.pool import WarmPools
from envfarm.settings import Settings
from envfarm.spec.errors_fmt import issue_text
from envfarm.spec.task import Task, discover_tasks

RUN_HELP = """Run agent sessions on tasks and grade them.

TASK_OR_DIR is a task directory (with task.toml) or a directory searched for task directories.
Each task's image is built locally, one sandbox per episode runs on the local Docker engine,
the policy drives the tools, and tests/test.sh grades the result.

Writes OUT/trajectories.jsonl (one line per episode, its final attempt) and OUT/summary.json,
and each episode's grading artifacts to OUT/artifacts/<episode_id>/ (see `envfarm regrade`).
Exit status: 0 when every episode ended with a valid reward (whatever its value); 1 when some
episode failed for an infrastructure reason after retries; 2 when some input was bad (the good
tasks still run).
"""


@click.command(help=RUN_HELP)
@run_flags
def run(
    paths: tuple[Path, ...],
    resume: Path | None,
    policies: tuple[str, ...],
    model: str | None,
    api_key: str | None,
    group_size: int,
    concurrency: int,
    out_dir: Path | None,
    temperature: float | None,
    top_p: float | None,
    max_tokens: int | None,
    seed: int | None,
    max_turns: int,
    agent_name: str | None,
    agent_spec: Path | None,
    context_budget: int | None,
    retries: int,
    server_profile: str,
    routed_experts: bool,
    token_mode: bool,
    tokenizer: str | None,
    tool_parser: str,
    samples: bool,
    compact_tokens: bool,
    warm_pool: int,
    runtime: str | None,
    judge: str | None,
    judge_model: str,
    judge_api_key: str | None,
    allow_unjudged: bool,
    offline: bool | None,
    verifier_network: str | None,
    sidecar_network: str | None,
    realism: str | None,
    fork: str | None,
) -> None:
    if resume is not None:
        secrets = {"api_key": api_key, "judge_api_key": judge_api_key}
        click.get_current_context().invoke(run, **load_manifest(resume, secrets))
        return
    if not paths:
        raise click.UsageError("give at least one TASK_OR_DIR (or --resume OUT_DIR)")
    settings = command_settings(
        offline=offline,
        verifier_network=verifier_network,
        sidecar_network=sidecar_network,
        realism=realism,
        runtime=runtime,
        fork=fork,
    )
    tasks, errors = discover_tasks(list(paths))
    bad_inputs = {error.path: str(error) for error in errors}
    for error in errors:
        console.print(f"[yellow]bad task:[/] {escape(str(error))}")
    for task in tasks:
        for issue in task.warnings:
            console.print(f"[dim]warning:[/] {escape(issue_text(issue))}")
    if not tasks:
        console.print("[red]no runnable task found[/]")
        sys.exit(EXIT_BAD_INPUT)
    try:
        policy = JobPolicy.model_validate(
            {
                **policy_fields(policies),
                "model": model,
                "api_key": api_key,
                "server_profile": server_profile,
                "routed_experts": routed_experts,
                "token_mode": token_mode,
                "tokenizer": tokenizer,
                "tool_parser": tool_parser,
            }
        )
        spec = policy_spec(policy)
        sampling = Sampling(temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed)
        judge_request = (
            JudgeRequest(base_url=judge, model=judge_model, api_key=judge_api_key)
            if judge
            else None
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    try:
        installed = resolve_agent(agent_name, agent_spec)
    except TaskSpecError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        sys.exit(EXIT_BAD_INPUT)
    allow_unjudged = allow_unjudged or spec.builtin
    if installed is not None:
        tasks = triage_mcp_tasks(tasks, installed, bad_inputs)
    tasks = triage_rubric_tasks(tasks, judge_request, allow_unjudged, bad_inputs)
    if spec.builtin:
        console.print(
            f"[cyan]notice:[/] the built-in [bold]{spec.base_url}[/] policy is driving the agent: "
            "no model is being trained or evaluated."
        )
    out = out_dir or Path("runs") / datetime.now().strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    if not resuming():
        save_manifest(out, click.get_current_context().params, settings)
    request = JobRequest(
        tasks=[task.id for task in tasks],
        policy=policy,
        group_size=group_size,
        sampling=sampling,
        max_retries=retries,
        max_turns=max_turns,
        context_budget=context_budget,
        judge=judge_request,
        allow_unjudged=allow_unjudged,
        agent=agent_name,
        agent_spec=installed.model_dump() if installed and agent_spec else None,
    )
    try:
        output = {"samples": samples, "compact_tokens": compact_tokens}
        summary = asyncio.run(
            _run_job(
                tasks,
                request,
                WorkerConfig(concurrency=concurrency),
                out,
                bad_inputs,
                output,
                settings,
                warm_pool=warm_pool,
            )
        )
    except KeyboardInterrupt:
        console.print(
            "[red]interrupted[/]: sandboxes were removed; partial results are in "
            f"{out}/trajectories.jsonl; finish the run with: envfarm run --resume {out}"
        )
        sys.exit(130)
    except EnvfarmError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        sys.exit(EXIT_BAD_INPUT if not exc.infrastructure else 1)
    console.print(summary_table(summary))
    console.print(
        f"trajectories: {out / 'trajectories.jsonl'}\nsummary:      {out / 'summary.json'}"
    )
    sys.exit(summary.exit_code)


async def _run_job(
    tasks: list[Task],
    request: JobRequest,
    worker: WorkerConfig,
    out: Path,
    bad_inputs: dict[str, str],
    output: dict[str, bool],
    settings: Settings,
    warm_pool: int = 0,
) -> RunSummary:
    started = time.monotonic()
    lines = (out / "trajectories.jsonl").open("a" if resuming() else "w", encoding="utf-8")
    episodes = len(tasks) * request.group_size
    async with (
        open_backend(settings) as backend,
        open_runner(
            request,
            backend,
            run_id=out.name,
            artifacts_dir=out / "artifacts",
            pools=WarmPools(backend, size=warm_pool, run_id=out.name) if warm_pool else None,
            settings=settings,
        ) as runner,
    ):
        with lines, JobProgress(console, len(tasks), episodes) as progress:

            def write_group(group: list[Trajectory]) -> None:
                for trajectory in group:
                    lines.write(trajectory.to_json(**output) + "\n")
                lines.flush()

            def image_done(
                task: Task, image: PreparedImage | None, error: EnvfarmError | None
            ) -> None:
                progress.image_done(task, image, error)
                plan = runner.planner.planned(task) if runner.planner is not None else None
                if runner.pools is not None and image is not None and plan is not None:
                    runner.pools.warm(plan.sandbox, image)
                if bad_input(error):  # its groups fail; no episode runs
                    progress.skip_episodes(request.group_size)

            job = Job(
                tasks,
                runner,
                without_keys(request),  # the run's store never holds a key
                JobEvents(
                    on_image=image_done,
                    on_episode=progress.episode_done,
                    on_group=write_group,
                ),
                worker=worker,
                admission=True,
                store_url=store_url(out),
                resume=await _resumed(out, progress) if resuming() else None,
            )
            try:
                result = await job.run()
            finally:
                if runner.pools is not None:
                    await runner.pools.close()
    _rewrite_trajectories(out, result.trajectories, output)
    for task_id, error in result.bad_tasks.items():
        bad_inputs[task_id] = str(error)
    summary = summarize(
        result.trajectories,
        job_id=job.id or "",
        policy=policy_spec(request.policy).label,
        model=runner.policy.model,
        bad_inputs=bad_inputs,
        duration_s=time.monotonic() - started,
    )
    summary_json = summary.model_dump(mode="json")
    if output["samples"]:
        summary_json["samples"] = _samples_note(result.trajectories)
    (out / "summary.json").write_text(json.dumps(summary_json, indent=2) + "\n", encoding="utf-8")
    return summary


async def _resumed(out: Path, progress: JobProgress) -> str:
    job_id, completed = await job_to_resume(out)
    progress.progress.advance(progress.episodes, completed)
    return job_id


def _samples_note(trajectories: list[Trajectory]) -> dict[str, object]:
    """How many samples ``--samples`` built and, when none, why (also on the terminal)."""
    built, why = samples_report(trajectories)
    if why:
        console.print(f"[yellow]--samples:[/] {escape(why)}")
    return {"built": built, "why_none": why}


def _rewrite_trajectories(
    out: Path, trajectories: list[Trajectory], output: dict[str, bool]
) -> None:
    """Every final trajectory of the job in group order, resumed parts included, exactly once."""
    partial = out / "trajectories.jsonl.tmp"
    with partial.open("w", encoding="utf-8") as lines:
        for trajectory in trajectories:
            lines.write(trajectory.to_json(**output) + "\n")
    partial.replace(out / "trajectories.jsonl")
