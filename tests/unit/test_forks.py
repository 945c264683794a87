"""``Forks``: one warm parent per environment of a job, its copies handed to the episodes, and
cold starts (with the reason, once) when no warm parent can be made."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from envfarm.errors import SandboxStartError
from envfarm.sandbox.fork import Forked, Forks
from envfarm.spec.task import Task, load_task
from envfarm.testing.fake_sandbox import FakeSandbox, ForkingFakeBackend
from tests.plans import sandbox_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")


def make_task(root: Path) -> Task:
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "task.toml").write_text('[environment.healthcheck]\ncommand = "true"\n')
    (root / "instruction.md").write_text("x\n")
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "tests" / "test.sh").write_text("true\n")
    return load_task(root)


async def test_one_warm_parent_gives_every_episode_its_own_started_copy(tmp_path: Path) -> None:
    backend = ForkingFakeBackend()
    spec = sandbox_spec(make_task(tmp_path / "t"))
    image = await backend.prepare(spec)
    forks = Forks(backend, "run")
    copies = await asyncio.gather(*(forks.acquire(spec, image) for _ in range(4)))
    assert len(backend.parents) == 1
    assert all(isinstance(c, Forked) for c in copies)
    sandboxes = [c.sandbox for c in copies if isinstance(c, Forked)]
    assert len({id(s) for s in sandboxes}) == 4
    assert all(isinstance(s, FakeSandbox) and s.running for s in sandboxes)
    assert {c.parent_id for c in copies if isinstance(c, Forked)} == {"warm-0"}
    await forks.close()
    assert backend.parents[0].closed
    assert all(isinstance(s, FakeSandbox) and s.running for s in sandboxes)  # the episodes'


async def test_no_warm_parent_means_cold_starts_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backend = ForkingFakeBackend()
    backend.warm_error = SandboxStartError("service 'db' never became healthy")
    spec = sandbox_spec(make_task(tmp_path / "t"))
    image = await backend.prepare(spec)
    forks = Forks(backend, "run")
    with caplog.at_level(logging.WARNING, logger="envfarm.sandbox.fork"):
        outcomes = await asyncio.gather(*(forks.acquire(spec, image) for _ in range(3)))
    assert all(isinstance(o, str) and "never became healthy" in o for o in outcomes)
    assert list(forks.reasons) == [spec.task_id]
    assert len([r for r in caplog.records if "start cold" in r.getMessage()]) == 1
    await forks.close()
