"""Command-line options shared by several commands, defined once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

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
