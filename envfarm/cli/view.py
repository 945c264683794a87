"""``envfarm view RUN_DIR...``: the browser viewer for run directories, on loopback only.

It serves read-only pages over the directories' ``trajectories.jsonl`` (and their artifacts)
on 127.0.0.1, prints the URL, and opens it in a browser unless ``--no-open``. Each page indexes
what a run appended since the page before, so a run still being written can be followed.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import webbrowser
from pathlib import Path

import click

from envfarm.api.server import ApiServer
from envfarm.controller.summary import EXIT_BAD_INPUT
from envfarm.errors import EnvfarmError
from envfarm.viewer import DirCatalog, create_viewer

HOST = "127.0.0.1"
DEFAULT_PORT = 8765


@click.command()
@click.argument(
    "run_dirs", metavar="RUN_DIR...", nargs=-1, required=True, type=click.Path(path_type=Path)
)
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="Port on 127.0.0.1 (0: any free port).")  # fmt: skip
@click.option("--open/--no-open", "open_browser", default=True, show_default=True,
              help="Open the viewer in a browser.")  # fmt: skip
def view(run_dirs: tuple[Path, ...], port: int, open_browser: bool) -> None:
    """Browse runs (the output directories of `envfarm run`) in a web browser."""
    try:
        catalog = DirCatalog(list(run_dirs))
    except EnvfarmError as exc:
        click.echo(f"envfarm view: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    title = "envfarm runs" if len(run_dirs) > 1 else f"envfarm run {run_dirs[0]}"
    app = create_viewer(catalog, title=title)
    try:
        asyncio.run(_serve(app, port, open_browser))
    except EnvfarmError as exc:
        click.echo(f"envfarm view: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        pass


async def _serve(app: object, port: int, open_browser: bool) -> None:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    async with ApiServer(app, HOST, port, graceful_s=1) as server:  # type: ignore[arg-type]
        url = f"{server.url}/"
        click.echo(f"envfarm view: serving on {url} (Ctrl-C to stop)", nl=True)
        sys.stdout.flush()
        if open_browser:
            with contextlib.suppress(webbrowser.Error):
                webbrowser.open(url)
        await stopping.wait()
