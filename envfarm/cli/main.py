"""The ``envfarm`` command: thin shells that parse input, call the controller, render output.

Each command of substance lives in its own module; this one assembles the group.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

import envfarm
from envfarm.cli.check import check
from envfarm.cli.export import export
from envfarm.cli.gc import gc
from envfarm.cli.operator import operator
from envfarm.cli.regrade import regrade
from envfarm.cli.run import run
from envfarm.cli.serve import serve, worker
from envfarm.cli.view import view
from envfarm.models.trajectory import trajectory_json_schema


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(envfarm.__version__, prog_name="envfarm")
def cli() -> None:
    """envfarm: sandboxed environments, agent sessions and graded trajectories for RL."""


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
cli.add_command(check)
cli.add_command(regrade)
cli.add_command(gc)
cli.add_command(serve)
cli.add_command(worker)
cli.add_command(export)
cli.add_command(operator)
cli.add_command(view)


def main() -> None:
    cli()
