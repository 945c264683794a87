"""``Forks``: one warm parent per environment of a job, its copies handed to the episodes, and
cold starts (with the reason, once) when the warm parent is not frozen or cannot be forked."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from envfarm.errors import SandboxStartError
from envfarm.sandbox.docker.fork_worth import worth_forking
from envfarm.sandbox.fork import Forked, Forks, NotWorthForking
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
    # begun as copies, finished as cold starts: each episode has its own, started
    assert all(isinstance(o, Forked) and o.parent_id is None for o in outcomes)
    assert all(isinstance(o, Forked) and o.method is None for o in outcomes)
    sandboxes = [o.sandbox for o in outcomes if isinstance(o, Forked)]
    assert all(isinstance(s, FakeSandbox) and s.running for s in sandboxes)
    assert len({id(s) for s in sandboxes}) == 3
    assert forks.reasons == {spec.task_id: "service 'db' never became healthy"}
    assert len([r for r in caplog.records if "start cold" in r.getMessage()]) == 1
    await forks.close()
    assert backend.parents[0].closed


async def test_an_environment_the_backend_cannot_fork_is_left_to_a_cold_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = ForkingFakeBackend()
    monkeypatch.setattr(backend, "fork_unsupported", lambda spec: "no snapshots here")
    spec = sandbox_spec(make_task(tmp_path / "t"))
    image = await backend.prepare(spec)
    forks = Forks(backend, "run")
    assert await forks.acquire(spec, image) == "no snapshots here"
    assert await forks.acquire(spec, image) == "no snapshots here"
    assert backend.parents == []
    assert forks.reasons == {spec.task_id: "no snapshots here"}
    await forks.close()
    assert await forks.acquire(spec, image) == "the job's warm environments are closed"


@pytest.mark.parametrize(
    ("waits", "worth"), [({"db": 7.5, "main": 0.0}, True), ({"db": 0.9}, False), ({}, False)]
)
async def test_a_parent_is_forked_only_when_its_services_took_long_to_be_ready(
    waits: dict[str, float], worth: bool
) -> None:
    if worth:
        worth_forking(waits)
    else:
        with pytest.raises(NotWorthForking, match="forking adds about 3 s"):
            worth_forking(waits)
