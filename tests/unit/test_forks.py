"""``Forks``: one warm parent per environment of a job, its copies handed to the episodes, and
cold starts (with the reason, once) when no warm parent can be made or forking would not pay."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from envfarm.errors import SandboxStartError
from envfarm.sandbox.docker.fork import DockerWarmParent
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
    assert all(isinstance(o, str) and "never became healthy" in o for o in outcomes)
    assert list(forks.reasons) == [spec.task_id]
    assert len([r for r in caplog.records if "start cold" in r.getMessage()]) == 1
    await forks.close()


async def test_a_parent_not_worth_forking_means_cold_starts_with_its_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backend = ForkingFakeBackend()
    reason = "its slowest service (db) was ready 0.9 s after it started"
    started = FakeSandbox()
    await started.start()
    backend.warm_error = NotWorthForking(reason, started=started)
    spec = sandbox_spec(make_task(tmp_path / "t"))
    image = await backend.prepare(spec)
    forks = Forks(backend, "run")
    with caplog.at_level(logging.WARNING, logger="envfarm.sandbox.fork"):
        outcomes = await asyncio.gather(*(forks.acquire(spec, image) for _ in range(3)))
    assert outcomes == [reason] * 3
    assert forks.reasons == {spec.task_id: reason}
    assert len([r for r in caplog.records if "start cold" in r.getMessage()]) == 1
    # The environment started to decide serves one episode as its cold sandbox, once.
    assert forks.take_started(spec, image) is started
    assert forks.take_started(spec, image) is None
    await forks.close()
    assert started.running  # the episode's to stop


async def test_an_environment_started_to_decide_and_left_untaken_is_stopped(
    tmp_path: Path,
) -> None:
    backend = ForkingFakeBackend()
    started = FakeSandbox()
    await started.start()
    backend.warm_error = NotWorthForking("quick", started=started)
    spec = sandbox_spec(make_task(tmp_path / "t"))
    image = await backend.prepare(spec)
    forks = Forks(backend, "run")
    assert await forks.acquire(spec, image) == "quick"
    await forks.close()
    assert not started.running


@pytest.mark.parametrize(
    ("waits", "worth"), [({"db": 7.5, "main": 0.0}, True), ({"db": 0.9}, False), ({}, False)]
)
async def test_a_parent_is_forked_only_when_its_services_took_long_to_be_ready(
    waits: dict[str, float], worth: bool
) -> None:
    parent = SimpleNamespace(env_id="w1", surroundings=SimpleNamespace(ready_waits=waits))
    warm = DockerWarmParent(None, None, parent, None)  # type: ignore[arg-type]
    if worth:
        warm._worth_forking()
    else:
        with pytest.raises(NotWorthForking, match="forking adds about 3 s"):
            warm._worth_forking()
