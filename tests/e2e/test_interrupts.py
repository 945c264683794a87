"""Leak-proof teardown when a run is interrupted (Ctrl-C) or killed outright (SIGKILL)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker

from envfarm.sandbox.docker.labels import LABEL_KIND, LABEL_TASK
from envfarm.sandbox.docker.reaper import reap_orphans

REPO = Path(__file__).resolve().parents[2]


def slow_task(root: Path, name: str) -> Path:
    task = root / name
    shutil.copytree(REPO / "tasks" / "fix-lru-cache", task)
    (task / "task.toml").write_text(
        f'[task]\nname = "test/{name}"\n[environment]\nworkdir = "/app"\n'
    )
    (task / "solution" / "solve.sh").write_text("sleep 120\n")
    return task


def _default_sigint() -> None:
    """A suite started in the background ignores SIGINT, and so would the run it starts."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_run(task: Path, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "envfarm", "run", str(task), "--out", str(out)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )


def containers_of(task_id: str) -> list[str]:
    client = docker.from_env()
    labels = [f"{LABEL_TASK}={task_id}", f"{LABEL_KIND}=sandbox"]  # not build containers
    # sparse: no inspect per container, which fails on a short-lived one (the compose
    # route-dropping helper) removed between the listing and the inspect
    found = client.containers.list(all=True, sparse=True, filters={"label": labels})
    return [c.id for c in found if c.id is not None]


def wait_for_container(task_id: str, proc: subprocess.Popen[str]) -> list[str]:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if ids := containers_of(task_id):
            time.sleep(1.0)  # let the oracle's command start
            return ids
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.2)
    raise AssertionError("the sandbox never appeared")


def test_ctrl_c_removes_the_sandboxes(tmp_path: Path) -> None:
    proc = start_run(slow_task(tmp_path, "interrupted"), tmp_path / "out")
    wait_for_container("test/interrupted", proc)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    assert "interrupted" in stderr
    assert containers_of("test/interrupted") == []


def test_sandboxes_of_a_killed_run_are_reaped(tmp_path: Path) -> None:
    proc = start_run(slow_task(tmp_path, "killed"), tmp_path / "out")
    [agent, *_] = wait_for_container("test/killed", proc)
    proc.kill()
    proc.communicate(timeout=60)
    orphans = containers_of("test/killed")  # SIGKILL leaves them behind (the agent's, and the
    assert agent in orphans  # clean room's created ahead of grading)...
    assert set(orphans) <= set(reap_orphans())  # ...until the next run reaps them
    assert containers_of("test/killed") == []


def test_gc_leaves_nothing_of_a_killed_run_with_services(tmp_path: Path) -> None:
    task = slow_task(tmp_path, "gc-killed")
    (task / "environment" / "docker-compose.yaml").write_text(
        "services:\n"
        "  main: {}\n"
        "  side:\n"
        "    image: debian:bookworm-slim\n"
        '    command: ["sleep", "infinity"]\n'
    )
    proc = start_run(task, tmp_path / "out")
    wait_for_container("test/gc-killed", proc)
    proc.kill()
    proc.communicate(timeout=60)
    client = docker.from_env()
    owner = f"{LABEL_TASK}=test/gc-killed"
    left = client.containers.list(all=True, filters={"label": owner})
    assert len(left) >= 2  # main and the sidecar survived the SIGKILL
    networks = {n for c in left for n in c.attrs["NetworkSettings"]["Networks"]} - {"none"}
    assert networks
    gc = subprocess.run(
        [sys.executable, "-m", "envfarm", "gc"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert gc.returncode == 0, gc.stderr[-2000:]
    assert client.containers.list(all=True, filters={"label": owner}) == []
    remaining = {n.name for n in client.networks.list()}
    assert not networks & remaining
