"""``envfarm run`` starts without the modules only other commands need: the API server's web
framework and the MCP SDK took over a second of every start (bench/RESULTS.md)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import click

from envfarm.cli.main import COMMANDS, cli

LOADED = textwrap.dedent(
    """
    import sys
    import click
    from envfarm.cli.main import cli
    assert cli.get_command(click.Context(cli), "run") is not None
    print(" ".join(sorted({name.split(".")[0] for name in sys.modules})))
    """
)


def test_run_does_not_load_the_server_or_the_mcp_sdk() -> None:
    done = subprocess.run(
        [sys.executable, "-c", LOADED], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = set(done.stdout.split())
    assert "sqlalchemy" in loaded  # the check sees what run needs
    assert not loaded & {"fastapi", "starlette", "uvicorn", "mcp", "kubernetes"}, loaded


def test_every_command_is_listed_and_loads() -> None:
    context = click.Context(cli)
    names = cli.list_commands(context)
    assert names == sorted(names)
    assert set(COMMANDS) | {"schema"} == set(names)
    for name in names:
        command = cli.get_command(context, name)
        assert isinstance(command, click.Command)
        assert command.name == name
