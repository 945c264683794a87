"""``envfarm check``: lint, build and run each task's oracle and nop; a table of verdicts."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from envfarm.check.pipeline import (
    CheckConfig,
    CheckEvents,
    CheckReport,
    check_tasks,
    episodes_per_task,
)
from envfarm.check.steps import step_cell
from envfarm.check.verdicts import TaskCheck
from envfarm.cli.options import (
    command_settings,
    fork_option,
    judge_options,
    offline_option,
    realism_option,
    sidecar_network_option,
    task_paths,
    verifier_network_option,
)
from envfarm.cli.render import JobProgress, console
from envfarm.controller.assembly import open_backend
from envfarm.controller.summary import EXIT_BAD_INPUT, EXIT_INFRA
from envfarm.errors import EnvfarmError
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.models.jobs import JudgeRequest
from envfarm.sandbox.base import PreparedImage
from envfarm.spec.task import Task, discover_tasks

CHECK_HELP = """Check that tasks are sound; exit 0 only when every one is.

For each task (TASK_OR_DIR is a task directory or a directory searched for them): lint the spec
(tests or solution leaking into the image, a broken tests/test.sh, network use), build the image,
look inside it for the tests, the solution or its output (also in git history), run the oracle
--runs times (every run must reach the maximum reward, and all must agree: a grader whose
rewards differ is flaky) and nop once (it must stay below the maximum).

--compare-modes also runs the oracle once in the other of the clean and shared verifier modes
and reports a task whose rewards differ (the clean room does not carry its outcome).

An oracle that misses the maximum is explained: the last lines of the verifier's output and
the directory of its artifacts (--artifacts, else a new temporary directory).

--no-run does the static lint only, and resolves every base image as a run would without a
registry (an image the engine holds, else an offline substitute), pulling nothing.

Exit status: 0 every task is sound; 2 some task is unsound or unreadable; 1 an infrastructure
error (image build, sandbox, judge) kept a task from being checked.
"""

_STYLE = {"sound": "green", "unsound": "red", "error": "yellow", "lint-only": "green"}


@click.command(help=CHECK_HELP)
@task_paths
@click.option(
    "--runs",
    default=3,
    show_default=True,
    type=click.IntRange(min=1),
    help="Oracle runs per task; their rewards must all agree.",
)
@offline_option
@verifier_network_option
@sidecar_network_option
@realism_option
@fork_option
@click.option("--no-run", is_flag=True, help="Lint only: no image build, no episodes.")
@click.option(
    "--compare-modes",
    is_flag=True,
    help="Also run the oracle once in the other of the clean and shared verifier modes; "
    "a task whose rewards differ between them is unsound.",
)
@click.option(
    "--artifacts",
    "artifacts",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep each episode's grading artifacts under this directory (default: a new "
    "temporary directory).",
)
@click.option(
    "--concurrency",
    default=4,
    show_default=True,
    type=click.IntRange(min=1),
    help="Episodes (and image inspections) running at once.",
)
@judge_options(
    "Judge endpoint for rubric tasks; without it their rubric part is reported unchecked."
)
def check(
    paths: tuple[Path, ...],
    runs: int,
    no_run: bool,
    compare_modes: bool,
    artifacts: Path | None,
    concurrency: int,
    judge: str | None,
    judge_model: str,
    judge_api_key: str | None,
    offline: bool | None,
    verifier_network: str | None,
    sidecar_network: str | None,
    realism: str | None,
    fork: str | None,
) -> None:
    settings = command_settings(
        offline=offline,
        verifier_network=verifier_network,
        sidecar_network=sidecar_network,
        realism=realism,
        fork=fork,
    )
    tasks, errors = discover_tasks(list(paths))
    try:
        judge_request = (
            JudgeRequest(base_url=judge, model=judge_model, api_key=judge_api_key)
            if judge
            else None
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    kept = None
    if not no_run and tasks:
        kept = (artifacts or Path(tempfile.mkdtemp(prefix="envfarm-check-"))) / "artifacts"
    config = CheckConfig(
        runs=runs,
        concurrency=concurrency,
        run=not no_run,
        judge=judge_request,
        compare_modes=compare_modes,
        artifacts_dir=kept,
        image_exists=_local_image_lookup() if no_run and tasks else None,
        settings=settings,
    )
    if kept is not None:
        console.print(f"[dim]artifacts under {escape(str(kept.parent))}[/]")

    async def checked(events: CheckEvents) -> CheckReport:
        if no_run or not tasks:
            return await check_tasks(tasks, errors, None, TestScriptGrader(), config, events)
        async with open_backend(settings) as backend:
            return await check_tasks(tasks, errors, backend, TestScriptGrader(), config, events)

    try:
        with _progress(config, tasks) as events:
            report = asyncio.run(checked(events))
    except KeyboardInterrupt:
        console.print("[red]interrupted[/]: sandboxes were removed")
        sys.exit(130)
    except EnvfarmError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        sys.exit(EXIT_INFRA if exc.infrastructure else EXIT_BAD_INPUT)
    _render(report)
    sys.exit(report.exit_code)


@contextmanager
def _progress(config: CheckConfig, tasks: list[Task]) -> Iterator[CheckEvents]:
    """``envfarm run``'s progress (bars on a terminal, else lines only), a line per image and
    episode, and one per task as soon as its verdict is known. The stages run at once: the
    images bar counts builds and says how many inspections are done, the episodes bar counts
    every stage's episodes and says how far each stage is."""
    if not config.run:
        yield CheckEvents()
        return
    episodes = {task.id: episodes_per_task(task, config) for task in tasks}
    progress = JobProgress(
        console, len(tasks), sum(episodes.values()), bars=console.is_terminal, every_event=True
    )
    stages: dict[str, tuple[int, int]] = {}

    def image(task: Task, image: PreparedImage | None, error: EnvfarmError | None) -> None:
        progress.image_done(task, image, error)
        if image is None:
            progress.skip_episodes(episodes[task.id])

    def stage(name: str, done: int, total: int) -> None:
        if name == "image":
            progress.progress.update(progress.images, note=f"inspected {done}/{total}")
        elif name != "build":
            stages[name] = (done, total)
            shown = "  ".join(f"{stage} {d}/{t}" for stage, (d, t) in stages.items() if t)
            progress.progress.update(progress.episodes, note=shown)

    with progress:
        yield CheckEvents(
            on_progress=stage,
            on_image=image,
            on_episode=lambda name, trajectory: progress.episode_done(trajectory, name),
            on_verdict=_say_verdict,
        )


def _say_verdict(check: TaskCheck) -> None:
    reason = next(iter((check.problems or check.infra or [""])[0].splitlines()), "")
    line = f"[{_STYLE[check.verdict]}]{check.verdict}[/] {escape(check.task_id)}"
    console.print(f"{line}: {escape(reason)}" if reason else line)


def _local_image_lookup() -> Callable[[str], bool]:
    from envfarm.sandbox.docker.images.local import local_image_exists

    return local_image_exists


def _rewards(check: TaskCheck) -> str:
    if not check.ran:
        return "-"
    if not check.oracle_rewards:
        return "-"
    return " ".join("none" if r is None else f"{r:.3g}" for r in check.oracle_rewards)


def _table(report: CheckReport) -> Table:
    table = Table(title="envfarm check")
    for name in ("task", "lint", "build", "oracle", "nop", "flaky", "judge", "verdict"):
        table.add_column(name, justify="right" if name in ("oracle", "nop") else "left")
    for check in report.checks:
        errors, warnings = check.lint_errors, check.lint_warnings
        lint = f"{errors} error{'s' * (errors != 1)}" if errors else "ok"
        if warnings:
            lint += f" ({warnings} warning{'s' * (warnings != 1)})"
        flaky = "-" if check.flaky is None else ("yes" if check.flaky else "no")
        nop = "-" if check.nop_reward is None else f"{check.nop_reward:.3g}"
        verdict = check.verdict
        reason = next(iter((check.problems or check.infra or [""])[0].splitlines()), "")
        shown = verdict if not reason else f"{verdict}: {_first_words(reason)}"
        table.add_row(
            escape(check.task_id),
            lint,
            check.build,
            _rewards(check),
            nop,
            flaky,
            escape(check.judge),
            f"[{_STYLE[verdict]}]{escape(shown)}[/]",
        )
        for step in check.steps:
            oracle = " ".join(step_cell(run) for run in step.oracle) or "-"
            cells = ["", "", oracle, step_cell(step.nop), "", "", ""]
            table.add_row(f"  step {escape(step.name)}", *cells, style="dim")
    for error in report.bad_inputs:
        table.add_row(
            escape(error.path), "unreadable", "-", "-", "-", "-", "-", "[red]bad input[/]"
        )
    return table


def _first_words(reason: str, width: int = 70) -> str:
    """The start of a reason for its cell, marked as cut; the whole of it follows the table."""
    return reason if len(reason) <= width else reason[: width - 1] + "… (below)"


def _render(report: CheckReport) -> None:
    console.print(_table(report))
    for check in report.checks:
        lines = [
            *(f"[red]problem[/] {escape(p)}" for p in check.problems),
            *(f"[yellow]infra[/]   {escape(p)}" for p in check.infra),
            *(f"[dim]warning {escape(w)}[/]" for w in check.warnings),
            *(f"[cyan]info[/]    {escape(i)}" for i in check.info),
            *(f"[dim]{escape(n)}[/]" for n in check.notes),
        ]
        if lines:
            console.print(f"[bold]{escape(check.task_id)}[/] ({escape(check.path)})")
            for line in lines:
                console.print(f"  {line}")
    for error in report.bad_inputs:
        console.print(f"[red]bad input[/] {escape(str(error))}")
    if not report.checks and not report.bad_inputs:
        console.print("[red]no task found[/]")
    sound = sum(1 for c in report.checks if c.verdict in ("sound", "lint-only"))
    console.print(f"{sound} of {len(report.checks) + len(report.bad_inputs)} tasks sound")
