"""``envfarm export``: trajectories to JSONL or Parquet, from a server's job or a run directory."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click
from rich.markup import escape

from envfarm.cli.render import console
from envfarm.client import EnvfarmClient
from envfarm.client.export import TrajectoryWriter, export_job, jsonl_path, read_jsonl
from envfarm.controller.summary import EXIT_BAD_INPUT
from envfarm.errors import EnvfarmError

EXPORT_HELP = """Write trajectories to FILE.jsonl or FILE.parquet for offline training.

Either from a server (--api URL --job ID: the job's completed groups, from the first unless
--after is given; nothing is acknowledged, so trainers consuming the job are not disturbed),
or from SOURCE, the output directory of `envfarm run` or its trajectories.jsonl.
The Parquet layout (one column per trajectory field, nested ones as JSON text) is described
in docs/api.md.
"""


@click.command(help=EXPORT_HELP)
@click.argument("source", required=False, type=click.Path(path_type=Path))
@click.option("--out", "out_file", required=True, type=click.Path(path_type=Path),
              help="Output file; its suffix (.jsonl or .parquet) picks the format.")  # fmt: skip
@click.option("--api", default=None, metavar="URL", help="Base URL of an envfarm server.")
@click.option("--job", "job_id", default=None, metavar="ID", help="Job to export (with --api).")
@click.option("--token", envvar="ENVFARM_TOKEN", default=None,
              help="Bearer token of the server (or ENVFARM_TOKEN).")  # fmt: skip
@click.option("--after", type=click.IntRange(min=0), default=0, show_default=True,
              help="Export only groups with a higher cursor.")  # fmt: skip
@click.option("--follow", is_flag=True,
              help="Keep waiting for groups until the job has ended.")  # fmt: skip
def export(
    source: Path | None,
    out_file: Path,
    api: str | None,
    job_id: str | None,
    token: str | None,
    after: int,
    follow: bool,
) -> None:
    if (source is None) == (api is None):
        raise click.UsageError("give either SOURCE (a run directory) or --api URL --job ID")
    if api is not None and job_id is None:
        raise click.UsageError("--api needs --job ID")
    try:
        jsonl = jsonl_path(source) if source is not None else None
        with TrajectoryWriter(out_file) as out:
            if jsonl is not None:
                for trajectory in read_jsonl(jsonl):
                    out.write(trajectory)
                groups = ""
            else:
                assert job_id is not None
                assert api is not None
                count = asyncio.run(_from_api(api, token, job_id, out, after, follow))
                groups = f" ({count} groups)"
    except EnvfarmError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        sys.exit(1 if exc.infrastructure else EXIT_BAD_INPUT)
    console.print(f"exported {out.count} trajectories{groups} to {escape(str(out_file))}")


async def _from_api(
    api: str, token: str | None, job_id: str, out: TrajectoryWriter, after: int, follow: bool
) -> int:
    async with EnvfarmClient(api, token) as client:
        return await export_job(client, job_id, out, after=after, follow=follow)
