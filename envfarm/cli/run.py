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
from envfarm.cli.options import judge_options, offline_option, verifier_network_option
from envfarm.cli.render import JobProgress, console, summary_table
from envfarm.cli.resume import load_manifest, resuming, save_manifest, store_url
from envfarm.cli.triage import triage_mcp_tasks, triage_rubric_tasks
from envfarm.controller.job import Job, JobEvents
from envfarm.controller.policies import policy_fields
from envfarm.controller.runners import open_runner, policy_spec
from envfarm.controller.summary import EXIT_BAD_INPUT, RunSummary, summarize
from envfarm.controller.worker import WorkerConfig
from envfarm.errors import EnvfarmError, TaskSpecError
from envfarm.models.jobs import (
    MAX_GROUP_SIZE,
    MAX_RETRIES,
    JobPolicy,
    JobRequest,
    JudgeRequest,
    Sampling,
    without_keys,
)
from envfarm.models.samples import samples_report
from envfarm.models.trajectory import Trajectory
from envfarm.policy.profiles import SERVER_PROFILES
from envfarm.policy.toolparse import TOOL_PARSERS
from envfarm.sandbox.base import PreparedImage, SandboxBackend
from envfarm.sandbox.pool import WarmPools
from envfarm.spec.errors_fmt import issue_text
from envfarm.spec.task import Task, discover_tasks
from envfarm.store.store import Store

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
@click.argument("paths", metavar="TASK_OR_DIR...", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--resume",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    default=None,
    metavar="OUT_DIR",
    help="Finish an interrupted run in OUT_DIR with its own tasks and options (API keys come "
    "again from --api-key / ENVFARM_API_KEY); finished episodes are not redone.",
)
@click.option(
    "--policy",
    "policies",
    multiple=True,
    default=("oracle",),
    show_default=True,
    help="oracle (runs the task's solution), nop (submits at once), "
    "or the base URL of an OpenAI-compatible endpoint, e.g. http://host:8000/v1. "
    "Repeat it to spread episodes over several endpoints, each URL optionally followed by "
    "=WEIGHT (its share of the load; default 1): --policy http://a:8000/v1 "
    "--policy http://b:8000/v1=2.",
)
@offline_option
@verifier_network_option
@click.option("--model", default=None, help="Model name sent to the endpoint.")
@click.option(
    "--api-key",
    envvar="ENVFARM_API_KEY",
    default=None,
    help="API key for the endpoints (or ENVFARM_API_KEY). Never written to any output.",
)
@click.option(
    "--group-size",
    default=1,
    show_default=True,
    type=click.IntRange(min=1, max=MAX_GROUP_SIZE),
    help="Episodes per task, graded as one GRPO group.",
)
@click.option(
    "--concurrency",
    default=4,
    show_default=True,
    type=click.IntRange(min=1),
    help="Episodes running at once.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Output directory [default: runs/<timestamp>/].",
)
@click.option("--temperature", type=float, default=None, help="Sampling temperature.")
@click.option("--top-p", type=float, default=None, help="Nucleus sampling top-p.")
@click.option("--max-tokens", type=int, default=None, help="Max tokens per model turn.")
@click.option(
    "--seed", type=int, default=None, help="Sampling seed; episode i of a group gets seed + i."
)
@click.option(
    "--max-turns",
    default=50,
    show_default=True,
    type=click.IntRange(min=1),
    help="Model turns per episode before it is stopped and graded.",
)
@click.option(
    "--agent",
    "agent_name",
    default=None,
    metavar="NAME",
    help="The harness in the sandbox: builtin (envfarm's tool loop, the default), "
    "mini-swe-agent or codex; their calls are captured token-exact (docs/agents.md).",
)
@click.option(
    "--agent-spec",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    metavar="FILE",
    help="Your own agent's spec (TOML, docs/agents.md), instead of --agent.",
)
@click.option(
    "--context-budget",
    type=click.IntRange(min=1),
    default=None,
    metavar="TOKENS",
    help="Prompt tokens before the agent summarizes its work and restarts its context from "
    "the instruction and the summary (self-summarization; a task's own "
    "[agent].context_budget_tokens applies when smaller). Default: no budget.",
)
@click.option(
    "--retries",
    default=2,
    show_default=True,
    type=click.IntRange(min=0, max=MAX_RETRIES),
    help="Extra attempts for an episode that failed for an infrastructure reason.",
)
@click.option(
    "--server-profile",
    type=click.Choice(SERVER_PROFILES),
    default="auto",
    show_default=True,
    help="How token ids, logprobs and versions are requested and read: vllm, sglang, llamacpp "
    "(llama.cpp's llama-server), openai (text only), or auto (the server's own API is probed "
    "once, before the first request; when nothing answers, the first answer decides). See "
    "docs/policies.md.",
)
@click.option(
    "--routed-experts",
    is_flag=True,
    help="Ask the server for MoE routed experts (SGLang; vLLM returns them when started with "
    "--enable-return-routed-experts).",
)
@click.option(
    "--token-mode",
    is_flag=True,
    help="Send prompts as token ids (vLLM, SGLang, llama.cpp): each prompt extends the last "
    "prompt and the ids the model sampled, so turns merge into one training sample. Checked "
    "before the job starts. See docs/policies.md.",
)
@click.option(
    "--tokenizer",
    default=None,
    metavar="NAME_OR_DIR",
    help="Token mode: render new messages with this Hugging Face tokenizer instead of the "
    "server's chat template (needed for SGLang).",
)
@click.option(
    "--tool-parser",
    type=click.Choice(TOOL_PARSERS),
    default="auto",
    show_default=True,
    help="Token mode: how tool calls are read from the sampled text (hermes: <tool_call>, "
    "fenced: a ```json block, llama: a bare JSON object).",
)
@click.option(
    "--samples",
    is_flag=True,
    help="Add merged training samples (token_ids, loss_mask, logprobs) to each trajectory.",
)
@click.option(
    "--compact-tokens",
    is_flag=True,
    help="Write each turn's prompt as the ids it adds to the previous context "
    "(prompt_suffix_ids) instead of in full.",
)
@click.option(
    "--warm-pool",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Started sandboxes kept ready per environment, so an episode does not wait for its "
    "sandbox to start (each is used once; the pool refills in the background).",
)
@click.option(
    "--runtime",
    default=None,
    metavar="NAME",
    help="Container runtime of every sandbox, as registered with the Docker engine, e.g. "
    "runsc (gVisor; tasks that need the network are refused under it). Default: the "
    "engine's. A task with [environment] runtime = 'gvisor' runs under gVisor anyway.",
)
@judge_options(
    "Base URL of an OpenAI-compatible endpoint that judges the tasks' rubric items "
    "(docs/rubrics.md); may be another server than the policy."
)
@click.option(
    "--allow-unjudged",
    is_flag=True,
    help="Without --judge, grade rubric tasks by their tests alone (flagged rubric:unjudged) "
    "instead of refusing them. Implied by the built-in oracle and nop policies.",
)
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
) -> None:
    if resume is not None:
        secrets = {"api_key": api_key, "judge_api_key": judge_api_key}
        click.get_current_context().invoke(run, **load_manifest(resume, secrets))
        return
    if not paths:
        raise click.UsageError("give at least one TASK_OR_DIR (or --resume OUT_DIR)")
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
            f"[cyan]notice:[/] the built-in [bold]{spec.target}[/] policy is driving the agent: "
            "no model is being trained or evaluated."
        )
    out = out_dir or Path("runs") / datetime.now().strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    if not resuming():
        save_manifest(out, click.get_current_context().params)
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
                runtime=runtime,
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


def _docker_backend(runtime: str | None = None) -> SandboxBackend:
    from envfarm.sandbox.docker.backend import DockerBackend

    return DockerBackend(runtime)


async def _run_job(
    tasks: list[Task],
    request: JobRequest,
    worker: WorkerConfig,
    out: Path,
    bad_inputs: dict[str, str],
    output: dict[str, bool],
    runtime: str | None = None,
    warm_pool: int = 0,
) -> RunSummary:
    started = time.monotonic()
    backend = _docker_backend(runtime)
    lines = (out / "trajectories.jsonl").open("a" if resuming() else "w", encoding="utf-8")
    pools = WarmPools(backend, size=warm_pool, run_id=out.name) if warm_pool else None
    episodes = len(tasks) * request.group_size
    async with open_runner(
        request, backend, run_id=out.name, artifacts_dir=out / "artifacts", pools=pools
    ) as runner:
        with lines, JobProgress(console, len(tasks), episodes) as progress:

            def write_group(group: list[Trajectory]) -> None:
                for trajectory in group:
                    lines.write(trajectory.to_json(**output) + "\n")
                lines.flush()

            def image_done(
                task: Task, image: PreparedImage | None, error: EnvfarmError | None
            ) -> None:
                progress.image_done(task, image, error)
                if runner.pools is not None and image is not None:
                    runner.pools.warm(task, image)
                if error is not None and not error.infrastructure:
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
                resume=await _job_to_resume(out, progress) if resuming() else None,
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


def _samples_note(trajectories: list[Trajectory]) -> dict[str, object]:
    """How many samples ``--samples`` built and, when none, why (also on the terminal)."""
    built, why = samples_report(trajectories)
    if why:
        console.print(f"[yellow]--samples:[/] {escape(why)}")
    return {"built": built, "why_none": why}


async def _job_to_resume(out: Path, progress: JobProgress) -> str:
    store = await Store.open(store_url(out))
    try:
        jobs = await store.jobs()
    finally:
        await store.close()
    if len(jobs) != 1:
        raise click.BadParameter(f"{out}: expected one job in its store, found {len(jobs)}")
    progress.progress.advance(progress.episodes, jobs[0].counts.completed)
    return jobs[0].id


def _rewrite_trajectories(
    out: Path, trajectories: list[Trajectory], output: dict[str, bool]
) -> None:
    """Every final trajectory of the job in group order, resumed parts included, exactly once."""
    partial = out / "trajectories.jsonl.tmp"
    with partial.open("w", encoding="utf-8") as lines:
        for trajectory in trajectories:
            lines.write(trajectory.to_json(**output) + "\n")
    partial.replace(out / "trajectories.jsonl")
