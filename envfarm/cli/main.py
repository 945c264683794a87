"""The ``envfarm`` command: thin shells that parse input, call the controller, render output.

Each command of substance lives in its own module; this one assembles the group. A command's
module is imported when that command runs (or ``--help`` lists them all): ``envfarm run`` never
loads the API server's web framework, the operator or the MCP SDK, which took over a second of
every start.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import click

import envfarm

COMMANDS = {
    "run": "envfarm.cli.run:run",
    "audit": "envfarm.cli.audit:audit",
    "check": "envfarm.cli.check:check",
    "regrade": "envfarm.cli.regrade:regrade",
    "gc": "envfarm.cli.gc:gc",
    "push": "envfarm.cli.push:push",
    "serve": "envfarm.cli.serve:serve",
    "worker": "envfarm.cli.serve:worker",
    "export": "envfarm.cli.export:export",
    "operator": "envfarm.cli.operator:operator",
    "view": "envfarm.cli.view:view",
}
"""Each command's ``module:attribute``."""


class LazyGroup(click.Group):
    """A group whose commands of ``COMMANDS`` are imported when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *COMMANDS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return super().get_command(ctx, cmd_name)
        module, _, attribute = COMMANDS[cmd_name].partition(":")
        command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
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
    from envfarm.models.trajectory import trajectory_json_schema

    text = json.dumps(trajectory_json_schema(), indent=2, sort_keys=True) + "\n"
    if out_file is None:
        click.echo(text, nl=False)
    else:
        out_file.write_text(text, encoding="utf-8")


def main() -> None:
    cli()
