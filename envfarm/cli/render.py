"""Rich rendering for the CLI: progress while a job runs, a per-task table when it ends.

A table cell never carries an error's text: an error names a file, a field and what was
expected, and a cut one says none of it. The table marks the row; the whole message follows
the table.
"""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from envfarm.controller.summary import RunSummary
from envfarm.errors import EnvfarmError
from envfarm.models.trajectory import Trajectory
from envfarm.sandbox.base import PreparedImage
from envfarm.spec.task import Task

console = Console(stderr=True, soft_wrap=True)
"""Everything the CLI says goes to standard error; standard output is for data."""


class JobProgress:
    """Two bars: images prepared and episodes finished, with a line per notable event.

    ``bars`` False (standard error is not a terminal): no bars, only the lines. ``every_event``:
    a line for every image and episode too (``envfarm check``: a killed or hung check's log
    then says how far it got)."""

    def __init__(
        self,
        console: Console,
        tasks: int,
        episodes: int,
        *,
        bars: bool = True,
        every_event: bool = False,
    ) -> None:
        self.console = console
        self.every_event = every_event
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description:<9}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[note]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
            disable=not bars,
        )
        self.images: TaskID = self.progress.add_task("images", total=tasks, note="")
        self.episodes: TaskID = self.progress.add_task("episodes", total=episodes, note="")
        self.rewards: list[float] = []

    def __enter__(self) -> JobProgress:
        self.progress.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.progress.stop()

    def image_done(
        self, task: Task, image: PreparedImage | None, error: EnvfarmError | None
    ) -> None:
        self.progress.advance(self.images)
        if error is not None:
            self.console.print(f"[red]image for {escape(task.id)} failed:[/] {escape(str(error))}")
        elif image is not None:
            how = "cached" if image.cached else f"built in {image.build_s:.1f}s"
            self.progress.update(self.images, note=f"{task.id}: {how}")
            if self.every_event:
                self.console.print(f"[dim]image[/] {escape(task.id)}: {how}")
            for warning in image.warnings:
                self.console.print(f"[yellow]warning[/] ({escape(task.id)}): {escape(warning)}")

    def episode_done(self, trajectory: Trajectory, stage: str = "episode") -> None:
        self.progress.advance(self.episodes)
        reward = trajectory.reward
        if self.every_event:
            self.console.print(f"[dim]{escape(stage)}[/] {escape(_episode_line(trajectory))}")
        if reward.valid and reward.value is not None:
            self.rewards.append(reward.value)
        elif trajectory.error is not None:
            self.console.print(
                f"[red]{trajectory.task_id}: {trajectory.error.phase} failed[/] "
                f"({trajectory.error.type}): {escape(trajectory.error.message[:500])}"
            )
        if self.rewards:
            mean = sum(self.rewards) / len(self.rewards)
            self.progress.update(self.episodes, note=f"mean reward {mean:.3f}")

    def skip_episodes(self, count: int) -> None:
        self.progress.advance(self.episodes, count)


def _episode_line(trajectory: Trajectory) -> str:
    reward = trajectory.reward
    shown = (
        f"reward {reward.value:.3g}"
        if reward.valid and reward.value is not None
        else ("no valid reward")
    )
    line = f"{trajectory.task_id} {trajectory.episode_id}: {shown}"
    if reward.flags:
        line += f" (flagged {', '.join(reward.flags)})"
    return line + (f"; artifacts {trajectory.artifacts}" if trajectory.artifacts else "")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def summary_table(summary: RunSummary) -> RenderableType:
    """The per-task table, then each bad input's full reason."""
    reasons = [
        f"[yellow]bad input[/] {escape(name)}: {escape(reason)}"
        for name, reason in summary.bad_inputs.items()
    ]
    return Group(_task_table(summary), *reasons)


def _task_table(summary: RunSummary) -> Table:
    table = Table(title=f"envfarm run {summary.job_id}  ({summary.policy}, {summary.model})")
    table.add_column("task", overflow="fold")
    table.add_column("episodes", justify="right")
    table.add_column("graded", justify="right")
    table.add_column("infra errors", justify="right")
    table.add_column("mean reward", justify="right")
    for task_id, task in summary.tasks.items():
        style = "red" if task.infra_errors else None
        table.add_row(
            escape(task_id),
            str(task.episodes),
            str(task.completed),
            str(task.infra_errors),
            _fmt(task.mean_reward),
            style=style,
        )
        for name, mean in (task.steps or {}).items():
            table.add_row(f"  step {escape(name)}", "", "", "", _fmt(mean), style="dim")
    for name in summary.bad_inputs:
        table.add_row(escape(name), "-", "-", "-", "bad input", style="yellow")
    table.add_section()
    table.add_row(
        "all",
        str(summary.episodes),
        str(summary.completed),
        str(summary.infra_errors),
        _fmt(summary.mean_reward),
        style="bold",
    )
    return table
