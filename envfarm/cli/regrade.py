"""``envfarm regrade``: recompute a run's rewards from its stored artifacts (docs/grading.md)."""

from __future__ import annotations

import json
import shutil
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from envfarm.cli.render import console
from envfarm.controller.regrade import SUMMARY, TRAJECTORIES, Regrade, regrade_run
from envfarm.controller.summary import EXIT_BAD_INPUT

REPORT = "regrade.json"
_SHOWN = {"value", "valid", "flags", "reason"}

REGRADE_HELP = """Recompute the rewards of a finished run without rerunning any agent.

OUT_DIR is a directory written by `envfarm run` (trajectories.jsonl, summary.json, artifacts/).
Each episode whose verifier ran is graded again from its kept verifier files, with its task's
current task.toml (fail_to_pass / pass_to_pass, reports, zero_on_flags) and the flags observed
during the run. Tasks are read from the directories the run used, or from --task.

Without --out, trajectories.jsonl and summary.json are rewritten in place and the previous
versions kept as *.bak-<timestamp>. With --out, the new files go to that directory (the
artifacts stay where they are). Either way regrade.json lists each episode's reward before
and after. Exit status: 0, or 2 when some task could not be loaded.
"""


@click.command(help=REGRADE_HELP)
@click.argument("out_dir", metavar="OUT_DIR", type=click.Path(path_type=Path, file_okay=False))
@click.option(
    "--task",
    "task_paths",
    multiple=True,
    type=click.Path(path_type=Path),
    help="Task directory (or a directory of tasks) to grade with; repeatable. "
    "Default: the task directories recorded in the run's artifacts.",
)
@click.option(
    "--out",
    "new_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Write the regraded run here instead of rewriting OUT_DIR in place.",
)
def regrade(out_dir: Path, task_paths: tuple[Path, ...], new_dir: Path | None) -> None:
    if not (out_dir / TRAJECTORIES).is_file():
        console.print(f"[red]error:[/] {escape(str(out_dir / TRAJECTORIES))} does not exist")
        sys.exit(EXIT_BAD_INPUT)
    try:
        result = regrade_run(out_dir, list(task_paths) if task_paths else None)
    except (ValueError, ValidationError, OSError) as exc:
        console.print(f"[red]error:[/] cannot regrade {escape(str(out_dir))}: {escape(str(exc))}")
        sys.exit(EXIT_BAD_INPUT)
    target = new_dir or out_dir
    target.mkdir(parents=True, exist_ok=True)
    if new_dir is None:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        for name in (TRAJECTORIES, SUMMARY):
            if (out_dir / name).is_file():
                shutil.copy2(out_dir / name, out_dir / f"{name}.bak-{stamp}")
    _write(out_dir, target, result)
    for where, problem in result.problems.items():
        console.print(f"[yellow]task not loaded:[/] {escape(where)}: {escape(problem)}")
    console.print(_table(result))
    console.print(f"trajectories: {target / TRAJECTORIES}\nsummary:      {target / SUMMARY}")
    sys.exit(EXIT_BAD_INPUT if result.problems else 0)


def _write(source: Path, target: Path, result: Regrade) -> None:
    (target / TRAJECTORIES).write_text("".join(line + "\n" for line in result.lines), "utf-8")
    try:
        old: dict[str, Any] = json.loads((source / SUMMARY).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        old = {}
    assert result.summary is not None
    merged = {**old, **result.summary.model_dump(mode="json")}
    (target / SUMMARY).write_text(json.dumps(merged, indent=2) + "\n", encoding="utf-8")
    report = {
        "source": str(source.resolve()),
        "at": datetime.now().isoformat(timespec="seconds"),
        "regraded": [
            {
                "episode_id": change.episode_id,
                "task_id": change.task_id,
                "before": change.before.model_dump(mode="json", include=_SHOWN),
                "after": change.after.model_dump(mode="json", include=_SHOWN),
                "changed": change.changed,
            }
            for change in result.changes
        ],
        "skipped": result.skipped,
        "task_problems": result.problems,
    }
    (target / REPORT).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def _shown(value: float | None, valid: bool) -> str:
    return "invalid" if not valid or value is None else f"{value:.3f}"


def _table(result: Regrade) -> Table:
    table = Table(title="regraded episodes")
    for column in ("task", "episode", "before", "after", "flags"):
        table.add_column(column)
    for change in result.changes:
        style = "bold" if change.changed else ""
        table.add_row(
            escape(change.task_id),
            change.episode_id,
            _shown(change.before.value, change.before.valid),
            _shown(change.after.value, change.after.valid),
            escape(", ".join(change.after.flags)),
            style=style,
        )
    for episode, why in result.skipped.items():
        table.add_row("", episode, "kept", "kept", escape(why), style="dim")
    return table
