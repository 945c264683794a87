"""``envfarm audit``: the tells a model can see from inside each task's environment."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from envfarm.audit.battery import Battery, load_battery
from envfarm.audit.host import probe_host
from envfarm.audit.report import AuditReport, ProbeResult, TaskAudit
from envfarm.audit.runner import audit_tasks
from envfarm.cli.options import command_settings, offline_option, realism_option, task_paths
from envfarm.errors import EnvfarmError
from envfarm.settings import Realism
from envfarm.spec.task import discover_tasks

AUDIT_HELP = """Look for tells: what a model can see, one command away, that it runs in a
harness's sandbox rather than on a developer's machine.

For each task (TASK_OR_DIR is a task directory or a directory searched for them) an episode is
started as `envfarm run` starts it, and a battery of probes runs during its agent phase through
the agent's own bash tool; the episode is then abandoned, never graded. Each probe's output is
judged against what a developer's workstation shows (docs/audit.md); every tell is reported
with the output that showed it.

--battery FILE merges probes of a TOML file into the shipped battery by id (docs/audit.md).
--compare-host also runs the battery on this machine and shows its verdict under each tell,
never counted (a host is no reference: servers run as root without a terminal).

Exit status: 0 no tell; 1 some tell; 2 some input was bad (a task, a battery file);
3 an environment did not start (infrastructure), so its task was not audited.
"""


@click.command(help=AUDIT_HELP)
@task_paths
@realism_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON report on stdout.")
@click.option(
    "--battery",
    "batteries",
    multiple=True,
    type=click.Path(path_type=Path),
    metavar="FILE",
    help="A TOML file of probes merged into the shipped battery by id (repeatable).",
)
@click.option("--compare-host", is_flag=True, help="Also run the battery on this machine.")
@click.option(
    "--concurrency", default=2, show_default=True, type=click.IntRange(min=1),
    help="Tasks audited at once.",
)  # fmt: skip
@click.option(
    "--runtime", default=None, metavar="NAME",
    help="Container runtime of every sandbox, e.g. runsc (gVisor), as for `envfarm run`.",
)  # fmt: skip
@offline_option
def audit(
    paths: tuple[Path, ...],
    realism: Realism | None,
    as_json: bool,
    batteries: tuple[Path, ...],
    compare_host: bool,
    concurrency: int,
    runtime: str | None,
    offline: bool | None,
) -> None:
    settings = command_settings(offline=offline, runtime=runtime)
    try:
        battery = load_battery(list(batteries))
    except EnvfarmError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    tasks, errors = discover_tasks(list(paths))
    for error in errors:
        click.echo(f"bad task: {error}", err=True)
    report = AuditReport(bad_inputs={error.path: str(error) for error in errors})
    if tasks:
        click.echo(f"auditing {len(tasks)} task(s) with {len(battery.probes)} probes", err=True)
        try:
            audited = audit_tasks(
                tasks, battery, realism=realism, settings=settings,
                concurrency=concurrency, on_task=_progress,
            )  # fmt: skip
            report = asyncio.run(audited)
        except EnvfarmError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2 if not exc.infrastructure else 3)
        report.bad_inputs = {error.path: str(error) for error in errors}
    elif not errors:
        click.echo("no task found", err=True)
        sys.exit(2)
    if compare_host:
        report.host = asyncio.run(probe_host(battery))
    if as_json:
        click.echo(report.model_dump_json(by_alias=True, indent=2))
    else:
        _render(report, battery)
    sys.exit(report.exit_code)


def _progress(audit: TaskAudit) -> None:
    done = audit.error or f"{len(audit.tells)} tell(s)"
    click.echo(f"audited {audit.task}: {done}", err=True)


def _render(report: AuditReport, battery: Battery) -> None:
    host = {p.id: p for p in report.host or []}
    for audit in report.tasks:
        profile = f", realism {audit.realism}" if audit.realism else ""
        if audit.error:
            click.echo(f"{audit.task}{profile}: not audited: {audit.error}")
            continue
        click.echo(f"{audit.task}{profile}: {len(audit.tells)} tell(s)")
        for probe in audit.probes:
            if probe.verdict == "clean":
                continue
            click.echo(f"  {probe.verdict.upper()} {probe.id} [{probe.category}, {probe.severity}]")
            click.echo(_indent(probe.evidence or "(no output)", "    | "))
            click.echo(f"    workstation: {probe.reference}")
            if probe.id in host:
                click.echo(f"    this host: {_host_cell(host[probe.id])}")
    for path, why in report.bad_inputs.items():
        click.echo(f"bad input {path}: {why}")
    audited = sum(1 for a in report.tasks if not a.error)
    click.echo(
        f"{report.tells} tell(s) in {audited} audited task(s), {len(battery.probes)} probes each"
        + (f"; {report.probe_errors} probe error(s)" if report.probe_errors else "")
    )


def _host_cell(probe: ProbeResult) -> str:
    first = probe.evidence.splitlines()[0] if probe.evidence else ""
    return f"{probe.verdict}" + (f" ({first})" if first and probe.verdict != "clean" else "")


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.splitlines())
