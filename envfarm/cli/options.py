"""Command-line options shared by several commands, defined once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from envfarm.errors import EnvfarmError
from envfarm.settings import Settings

F = TypeVar("F", bound=Callable[..., Any])

task_paths = click.argument(
    "paths", metavar="TASK_OR_DIR...", nargs=-1, required=True, type=click.Path(path_type=Path)
)


def judge_options(judge_help: str) -> Callable[[F], F]:
    """``--judge URL``, ``--judge-model``, ``--judge-api-key`` (or ENVFARM_JUDGE_API_KEY)."""

    def decorate(command: F) -> F:
        command = click.option(
            "--judge-api-key",
            envvar="ENVFARM_JUDGE_API_KEY",
            default=None,
            help="API key for the judge (or ENVFARM_JUDGE_API_KEY). Never written to any output.",
        )(command)
        command = click.option(
            "--judge-model", default="default", show_default=True, help="Judge model name."
        )(command)
        return click.option("--judge", default=None, metavar="URL", help=judge_help)(command)

    return decorate


offline_option = click.option(
    "--offline",
    is_flag=True,
    default=None,
    help="Pull no base image: a base is a local image or an offline substitute "
    "(also ENVFARM_OFFLINE=1; docs/images.md).",
)

verifier_network_option = click.option(
    "--verifier-network",
    type=click.Choice(["task-default", "none"]),
    default=None,
    help="The verifier's network when a task sets no network field: task-default (the "
    "default) gives a clean-room verifier Harbor's public network, none keeps it offline "
    "(also ENVFARM_VERIFIER_NETWORK; the agent never gets a network it did not ask for; "
    "docs/task-format.md).",
)

sidecar_network_option = click.option(
    "--sidecar-network",
    type=click.Choice(["public", "none"]),
    default=None,
    help="Outbound network of compose sidecars (services other than main): public (the "
    "default, as under Harbor) or none (also ENVFARM_SIDECAR_NETWORK; the agent's container "
    "keeps no network unless its task asks; docs/security.md).",
)

realism_option = click.option(
    "--realism",
    type=click.Choice(["workstation", "off"]),
    default=None,
    help="The sandboxes' profile when a task sets none: workstation makes them look like a "
    "developer's machine (a user with a home and sudo, a terminal, developer tools, no "
    "container or grading tells), off (the default) as they are (also ENVFARM_REALISM; "
    "docs/sandbox.md).",
)

fork_option = click.option(
    "--fork",
    type=click.Choice(["auto", "off"]),
    default=None,
    help="auto (the default): a group's sandboxes are copies of one warm environment where "
    "the engine can fork it (a task with services or a healthcheck, on Docker); off: each "
    "starts cold. For serve, the default of jobs that set no fork (docs/fork.md).",
)


def command_settings(**flags: Any) -> Settings:
    """The environment's settings with the command's flags (None: not given) in their
    fields; a bad ``ENVFARM_*`` value is a usage error naming the variable."""
    try:
        return Settings.from_env().with_flags(**flags)
    except EnvfarmError as exc:
        raise click.UsageError(str(exc)) from exc
