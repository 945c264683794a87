"""Command-line options shared by several commands, defined once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from envfarm.errors import TaskSpecError

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


def _go_offline(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        from envfarm.sandbox.imagesources import set_offline

        set_offline()


offline_option = click.option(
    "--offline",
    is_flag=True,
    expose_value=False,
    callback=_go_offline,
    help="Pull no base image: a base is a local image or an offline substitute "
    "(also ENVFARM_OFFLINE=1; docs/images.md).",
)


def _verifier_network(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    from envfarm.spec.network import (
        VerifierNetworkDefault,
        set_verifier_network_default,
        verifier_network_default,
    )

    if value is not None:
        set_verifier_network_default(cast("VerifierNetworkDefault", value))
        return
    try:
        verifier_network_default()  # a bad ENVFARM_VERIFIER_NETWORK is refused before anything
    except TaskSpecError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from exc


verifier_network_option = click.option(
    "--verifier-network",
    type=click.Choice(["task-default", "none"]),
    default=None,
    expose_value=False,
    callback=_verifier_network,
    help="The verifier's network when a task sets no network field: task-default (the "
    "default) gives a clean-room verifier Harbor's public network, none keeps it offline "
    "(also ENVFARM_VERIFIER_NETWORK; the agent never gets a network it did not ask for; "
    "docs/task-format.md).",
)
