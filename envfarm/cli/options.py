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
