"""The ``envfarm`` command: thin shells that parse input, call the controller, render output.

Each command of substance lives in its own module; this one assembles the group.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.markup import escape

import envfarm
from envfarm.cli.render import console
from envfarm.cli.run import run
from envfarm.controller.summary import EXIT_BAD_INPUT
from envfarm.models.trajectory import trajectory_json_schema
from envfarm.spec.task import discover_tasks


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(envfarm.__version__, prog_name="envfarm")
def cli() -> None:
    """envfarm: sandboxed environments, agent sessions and graded trajectories for RL."""


@cli.command()
@click.argument(
    "paths", metavar="TASK_OR_DIR...", nargs=-1, required=True, type=click.Path(path_type=Path)
)
def check(paths: tuple[Path, ...]) -> None:
    """Check task specs; exit 0 only when every task is sound."""
    tasks, errors = discover_tasks(list(paths))
    for task in tasks:
        console.print(f"[green]ok[/]   {escape(task.id)}  ({escape(str(task.root))})")
    for error in errors:
        console.print(f"[red]bad[/]  {escape(str(error))}")
    sys.exit(EXIT_BAD_INPUT if errors or not tasks else 0)


@cli.command()
@click.option(
    "--out",
    "out_file",
    type=click.Path(path_type=Path),
    default=None,
    help="Write to this file instead of standard output.",
)
def schema(out_file: Path | None) -> None:
    """Print the JSON Schema of envfarm.trajectory/1."""
    text = json.dumps(trajectory_json_schema(), indent=2, sort_keys=True) + "\n"
    if out_file is None:
        click.echo(text, nl=False)
    else:
        out_file.write_text(text, encoding="utf-8")


cli.add_command(run)


def main() -> None:
    cli()
