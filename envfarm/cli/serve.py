"""``envfarm serve`` (the REST API, with a worker by default) and ``envfarm worker`` (no HTTP).

Both open one controller on the store at ``--db``; every process pointed at the same database
shares its jobs, so ``envfarm worker`` processes (on this machine or others, with PostgreSQL)
add capacity to a server. SIGTERM and SIGINT stop them gracefully: the API stops taking
requests (in-flight ones get a few seconds), then the worker stops and gives back its episodes
(another worker, or this one after a restart, retries them), then the store closes.
"""

from __future__ import annotations

import asyncio
import logging
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.markup import escape

from envfarm.api import create_app
from envfarm.api.app import DEFAULT_MAX_BODY_BYTES
from envfarm.api.server import ApiServer
from envfarm.cli.options import (
    command_settings,
    fork_option,
    offline_option,
    realism_option,
    sidecar_network_option,
    verifier_network_option,
)
from envfarm.cli.render import console
from envfarm.controller.assembly import open_backend
from envfarm.controller.service import Controller, open_controller
from envfarm.controller.sessions import Sessions
from envfarm.controller.summary import EXIT_BAD_INPUT
from envfarm.controller.worker import WorkerConfig
from envfarm.errors import EnvfarmError
from envfarm.paths import user_data_dir
from envfarm.settings import Settings
from envfarm.spec.datasets import is_dataset_path
from envfarm.spec.task import Task, discover_tasks
from envfarm.store.engine import default_url

F = TypeVar("F", bound=Callable[..., Any])
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def controller_options(command: F) -> F:
    """``--db``, ``--data-dir``, ``--tasks``, ``--concurrency``, ``--warm-pool``, and the
    defaults of every job's plan: ``--runtime``, ``--allow-runtime``, ``--verifier-network``,
    ``--realism``, ``--offline`` (the settings flags, handed to the command as ``**flags``)."""
    options = [
        verifier_network_option,
        sidecar_network_option,
        realism_option,
        fork_option,
        offline_option,
        click.option("--request-ratio", type=click.FloatRange(0, 1, min_open=True), default=None,
                     help="Kubernetes: what each environment pod requests of its CPU, memory "
                     "and disk limits, for jobs that say nothing (default 0.5)."),
        click.option("--allow-runtime", "allowed_runtimes", multiple=True, metavar="NAME",
                     help="A runtime a job may ask for (JobRequest.runtime) besides --runtime; "
                     "repeat for more. A job asking for any other is refused (422)."),
        click.option("--warm-pool", type=click.IntRange(min=0), default=0, show_default=True,
                     help="Started sandboxes kept ready per environment, so an episode starts "
                     "in milliseconds (each is used once; pools refill in the background)."),
        click.option("--runtime", default=None, metavar="NAME",
                     help="Container runtime (Docker) or RuntimeClass (Kubernetes) of every "
                     "sandbox whose job names none (e.g. runsc); default: the engine's."),
        click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True,
                     help="Episodes this process runs at once (all jobs together)."),
        click.option("--tasks", "tasks_dir", type=click.Path(path_type=Path), default=Path("tasks"),
                     show_default=True,
                     help="Directory of task directories; jobs name tasks by id."),
        click.option("--data-dir", type=click.Path(path_type=Path), default=None,
                     envvar="ENVFARM_DATA_DIR",
                     help="Where the default SQLite store and grading artifacts live (or "
                     "ENVFARM_DATA_DIR) [default: $XDG_DATA_HOME/envfarm, else "
                     "~/.local/share/envfarm]."),
        click.option("--db", default=None, metavar="URL",
                     help="Store: sqlite:///FILE or postgresql://USER:PASSWORD@HOST/DB "
                     "[default: DATA_DIR/envfarm.db]. Processes sharing one database share "
                     "its jobs."),
    ]  # fmt: skip
    for option in options:
        command = option(command)
    return command


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="Port to listen on (0: any free port; the URL is printed).")  # fmt: skip
@click.option("--token", envvar="ENVFARM_TOKEN", default=None,
              help="Bearer token all routes but /healthz require (or ENVFARM_TOKEN).")  # fmt: skip
@click.option("--worker/--no-worker", default=True, show_default=True,
              help="Also run episodes in this process (--no-worker: API only; run "
              "`envfarm worker` processes on the same --db).")  # fmt: skip
@click.option("--max-body-bytes", type=click.IntRange(min=1024), default=DEFAULT_MAX_BODY_BYTES,
              show_default=True, help="Larger request bodies get 413.")  # fmt: skip
@click.option("--access-log", is_flag=True, help="Log every HTTP request.")
@click.option(
    "--session-idle",
    "session_idle_s",
    type=click.FloatRange(min=1),
    default=600.0,
    show_default=True,
    metavar="SECONDS",
    help="A step-API session (/v1/openenv, docs/trainers.md) with no message for this "
    "long is abandoned: its sandbox is removed, its episode recorded ungraded.",
)
@controller_options
def serve(
    host: str,
    port: int,
    token: str | None,
    worker: bool,
    max_body_bytes: int,
    access_log: bool,
    session_idle_s: float,
    db: str | None,
    data_dir: Path | None,
    tasks_dir: Path,
    concurrency: int,
    warm_pool: int,
    **flags: Any,
) -> None:
    """Serve the REST API for trainers (docs/api.md), running episodes in this process too."""
    from envfarm.api.allocator import keep_freed_memory

    keep_freed_memory()
    settings = _settings(flags)
    tasks = _load_tasks(tasks_dir)
    data_dir = data_dir or user_data_dir()
    url = db or default_url(data_dir)

    async def main(stopping: asyncio.Event) -> None:
        work = (concurrency, warm_pool) if worker else None
        async with _controller(url, tasks, data_dir, settings, work) as controller:
            sessions = Sessions(controller.worker, tasks) if controller.worker else None
            app = create_app(
                controller,
                token=token,
                max_body_bytes=max_body_bytes,
                sessions=sessions,
                session_idle_s=session_idle_s,
            )
            server = ApiServer(app, host, port, access_log=access_log)
            await server.start()
            mode = f"worker: {concurrency} at once" if worker else "no worker"
            console.print(
                f"envfarm: serving on {server.url} ({len(tasks)} tasks, store "
                f"{escape(_redacted(url))}, {mode}){'' if token else '; no token: open to all'}",
                soft_wrap=True,
            )
            serving = asyncio.create_task(server.wait())
            await asyncio.wait([serving, asyncio.create_task(stopping.wait())],
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            server.stop()
            await serving

    _run(main)


@click.command()
@controller_options
def worker(
    db: str | None,
    data_dir: Path | None,
    tasks_dir: Path,
    concurrency: int,
    warm_pool: int,
    **flags: Any,
) -> None:
    """Run episodes of the jobs in the store at --db, without serving HTTP."""
    settings = _settings(flags)
    tasks = _load_tasks(tasks_dir)
    data_dir = data_dir or user_data_dir()
    url = db or default_url(data_dir)

    async def main(stopping: asyncio.Event) -> None:
        async with _controller(url, tasks, data_dir, settings, (concurrency, warm_pool)):
            console.print(
                f"envfarm: worker on {escape(_redacted(url))} ({len(tasks)} tasks, "
                f"{concurrency} at once)",
                soft_wrap=True,
            )
            await stopping.wait()

    _run(main)


def _settings(flags: dict[str, Any]) -> Settings:
    flags["allowed_runtimes"] = tuple(flags.get("allowed_runtimes") or ()) or None
    return command_settings(**flags)


@asynccontextmanager
async def _controller(
    url: str,
    tasks: dict[str, Task],
    data_dir: Path,
    settings: Settings,
    work: tuple[int, int] | None,
) -> AsyncIterator[Controller]:
    """The controller both commands open; ``work`` (concurrency, warm pool) when this process
    also runs episodes."""
    artifacts = data_dir / "artifacts"
    if work is None:
        async with open_controller(
            url, tasks, artifacts_root=artifacts, settings=settings
        ) as controller:
            yield controller
        return
    concurrency, warm_pool = work
    async with (
        open_backend(settings) as backend,
        open_controller(
            url,
            tasks,
            backend=backend,
            worker=WorkerConfig(concurrency=concurrency),
            artifacts_root=artifacts,
            warm_pool=warm_pool,
            settings=settings,
        ) as controller,
    ):
        yield controller


def _run(main: Callable[[asyncio.Event], Any]) -> None:
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    logging.getLogger("alembic").setLevel(logging.WARNING)  # its migration notes are not ours

    async def guarded() -> None:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, _on_signal, stopping, signum)
        await main(stopping)

    try:
        asyncio.run(guarded())
    except EnvfarmError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        sys.exit(1 if exc.infrastructure else EXIT_BAD_INPUT)
    console.print("envfarm: stopped")


def _on_signal(stopping: asyncio.Event, signum: int) -> None:
    if stopping.is_set():
        raise KeyboardInterrupt  # a second signal: stop now
    console.print(f"envfarm: {signal.Signals(signum).name}: stopping (again to force)")
    stopping.set()


def _load_tasks(tasks_dir: Path) -> dict[str, Task]:
    if not tasks_dir.is_dir() and not is_dataset_path(tasks_dir):
        raise click.BadParameter(
            f"{tasks_dir} is neither a directory nor a dataset file (.json, .jsonl, .parquet)",
            param_hint="--tasks",
        )
    tasks, errors = discover_tasks([tasks_dir])
    for error in errors:
        console.print(f"[yellow]bad task (not served):[/] {escape(str(error))}", soft_wrap=True)
    return {task.id: task for task in tasks}


def _redacted(url: str) -> str:
    return re.sub(r"://([^:/@]+):[^@/]*@", r"://\1:***@", url)
