"""``envfarm audit`` on the real engine: the battery, run through the agent's ``bash`` tool in
a ``python:3.11-slim`` task's agent phase, finds each of today's tells on the default profile;
the command's exit codes and JSON report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from envfarm.audit.battery import load_battery
from envfarm.audit.runner import audit_task
from envfarm.sandbox.docker.labels import LABEL_RUN
from tests.conftest import REPO

TASK = REPO / "tests" / "fixtures" / "tasks" / "audit-slim"
CGROUP_V1 = not Path("/sys/fs/cgroup/cgroup.controllers").exists()
"""Under cgroup v2 the engine gives a container a private cgroup namespace: ``0::/``, no tell."""
DMESG_RESTRICTED = Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() == "1"
"""Where the host lets anyone read the kernel log, a sandbox's root reads it too."""
TODAY = {
    "pid1": "/.envfarm/sandboxd --pids-limit",
    "process-names": "sandboxd",
    "process-count": "processes=",
    "hostname": "sandbox",
    "uname": "sandbox",
    "container-markers": "present: /.dockerenv",
    "mounts": "tmpfs /logs/verifier",
    "root-filesystem": " / ",
    "mount-sources": "/.envfarm/sandboxd",
    "user-root": "uid=0(root)",
    "user-env": "USER=",
    "home": "entries=",
    "gitconfig": "(no output)",
    "shell-history": "(no output)",
    "tty": "stdin: not a terminal",
    "term": "TERM=",
    "dev": "entries=",
    "dev-tools": "missing: make",
    "network": "lo",
    "grading-paths": "present: /logs/verifier",
    "names": ".envfarm",
    "machine-id": "machine-id=",
    "memory-vs-limit": "limit_mb=",
    **({"cgroup": "/docker/"} if CGROUP_V1 else {}),
    **({"dmesg": "uid=0"} if DMESG_RESTRICTED else {}),
}


KEPT_BY_THE_KERNEL = {"root-filesystem", "dmi"}
"""What the workstation profile cannot hide under runc (docs/sandbox.md says why)."""
BOOTED_RECENTLY = float(Path("/proc/uptime").read_text().split()[0]) < 1200
"""A container shares the kernel's uptime: on a machine booted minutes ago it is a tell."""


def envfarm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envfarm", "audit", *args],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip


@pytest.mark.asyncio(loop_scope="session")
async def test_the_audit_finds_todays_tells_on_the_default_profile() -> None:
    report = await audit_task(TASK, realism="off")
    [audit] = report.tasks
    assert audit.realism == "off"
    assert audit.error is None
    assert audit.episode_id
    assert [p.id for p in audit.probes] == [p.id for p in load_battery().probes]
    assert report.probe_errors == 0, [p for p in audit.probes if p.verdict == "error"]
    tells = {p.id: p for p in audit.tells}
    missing = sorted(set(TODAY) - set(tells))
    assert not missing, {p.id: p.evidence for p in audit.probes if p.id in missing}
    for probe_id, shown in TODAY.items():
        assert shown in tells[probe_id].evidence, (probe_id, tells[probe_id].evidence)
    assert report.tells == len(tells)
    assert report.exit_code == 1
    run = f"{LABEL_RUN}={audit.job_id}"  # abandoned: its sandbox is gone when the audit ends
    assert not docker.from_env().containers.list(all=True, filters={"label": run})


@pytest.mark.asyncio(loop_scope="session")
async def test_the_workstation_profile_leaves_only_what_the_kernel_keeps() -> None:
    report = await audit_task(TASK, realism="workstation")
    [audit] = report.tasks
    assert audit.realism == "workstation"
    assert audit.error is None
    assert report.probe_errors == 0, [p for p in audit.probes if p.verdict == "error"]
    kept = KEPT_BY_THE_KERNEL | ({"uptime"} if BOOTED_RECENTLY else set())
    tells = {p.id: p.evidence for p in audit.tells}
    assert set(tells) <= kept, tells
    assert "root-filesystem" in tells  # the storage driver's mount line: no runc hides it


def test_the_command_reports_json_and_exits_by_what_it_found(tmp_path: Path) -> None:
    found = envfarm(str(TASK), "--json")
    assert found.returncode == 1, found.stderr
    report = json.loads(found.stdout)
    assert report["schema"] == "envfarm.audit/1"
    assert report["tells"] >= len(TODAY)
    assert "audited fixtures/audit-slim" in found.stderr
    only = tmp_path / "only.toml"
    disabled = "".join(
        f'[[probe]]\nid = "{p.id}"\ncategory = "-"\ncommand = "true"\nreference = "-"\n'
        'rule = { kind = "match", pattern = "x" }\nenabled = false\n'
        for p in load_battery().probes
    )
    only.write_text(
        disabled + '[[probe]]\nid = "shell"\ncategory = "user"\nreference = "bash is there"\n'
        "command = 'echo \"$BASH_VERSION\"'\nrule = { kind = \"absent\", pattern = '^5\\.' }\n"
        '[[probe]]\nid = "slow"\ncategory = "user"\nreference = "-"\ncommand = "sleep 30"\n'
        'timeout_s = 1\nrule = { kind = "absent", pattern = "never" }\n'
    )
    clean = envfarm(str(TASK), "--battery", str(only))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "ERROR slow [user, medium]\n    | timed out after 1s" in clean.stdout
    assert "0 tell(s) in 1 audited task(s), 2 probes each; 1 probe error(s)" in clean.stdout
