import asyncio
from pathlib import Path

import pytest

from envfarm.controller.admission import Admission
from envfarm.errors import SandboxStartError
from envfarm.plan.models import JobChoices
from envfarm.plan.planner import plan_episode
from envfarm.sandbox.pool import WarmPools
from envfarm.spec.task import Task, load_task
from envfarm.testing.fake_sandbox import FakeBackend, FakeSandbox, ForkingFakeBackend
from tests.plans import sandbox_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")


def make_task(root: Path, toml: str = "") -> Task:
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "task.toml").write_text(toml)
    (root / "instruction.md").write_text("x\n")
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "tests" / "test.sh").write_text("true\n")
    return load_task(root)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_warm_pool_hands_out_started_sandboxes_once_and_refills(tmp_path: Path) -> None:
    task = make_task(tmp_path / "t")
    backend = FakeBackend()
    image = await backend.prepare(sandbox_spec(task))
    pools = WarmPools(backend, size=2, run_id="r")
    pools.warm(sandbox_spec(task), image)
    await settle()
    assert len(backend.created) == 2
    first = (await pools.acquire(sandbox_spec(task), image)).sandbox
    second = (await pools.acquire(sandbox_spec(task), image)).sandbox
    assert isinstance(first, FakeSandbox)
    assert first.running
    assert first is not second
    assert pools.stats.warm_hits == 2
    assert pools.stats.cold_starts == 0
    await settle()
    assert len(backend.created) == 4  # refilled back to size, never reusing a handed-out one
    third = (await pools.acquire(sandbox_spec(task), image)).sandbox
    assert third not in (first, second)
    await pools.close()
    await settle()
    waiting = [s for s in backend.created if s not in (first, second, third)]
    assert waiting
    assert all(not s.running for s in waiting)
    assert first.running  # handed out: its episode owns it


async def test_empty_pool_starts_cold_and_failed_refills_are_recorded(tmp_path: Path) -> None:
    task = make_task(tmp_path / "t")

    backend = FakeBackend()
    image = await backend.prepare(sandbox_spec(task))
    pools = WarmPools(backend, size=1, run_id="r")
    got = await pools.acquire(sandbox_spec(task), image)
    sandbox = got.sandbox
    assert got.parent_id is None  # the fake backend does not fork
    assert isinstance(sandbox, FakeSandbox)
    assert sandbox.running
    assert pools.stats.cold_starts == 1
    await settle()
    backend.start_error = SandboxStartError("engine said no")
    await pools.acquire(sandbox_spec(task), image)  # the warm one; the refill after it fails
    await settle()
    assert pools.stats.errors == ["engine said no"]
    with pytest.raises(SandboxStartError):
        await pools.acquire(sandbox_spec(task), image)
    await pools.close()


async def test_a_pool_of_a_forking_environment_is_filled_with_copies(tmp_path: Path) -> None:
    task = make_task(tmp_path / "t", toml='[environment.healthcheck]\ncommand = "true"\n')
    backend = ForkingFakeBackend()
    spec = plan_episode(task, JobChoices(group_size=4), facts=await backend.facts()).sandbox
    assert spec.fork
    image = await backend.prepare(spec)
    pools = WarmPools(backend, size=2, run_id="r")
    pools.warm(spec, image)
    await settle()
    got = await pools.acquire(spec, image)
    assert (got.parent_id, got.method) == ("warm-0", "fake")
    assert isinstance(got.sandbox, FakeSandbox)
    assert got.sandbox.running
    await settle()
    assert len(backend.parents) == 1  # one warm parent for the pool's life, refills its copies
    assert len(backend.created) == 3
    await pools.close()
    assert backend.parents[0].closed
    assert got.sandbox.running  # handed out: its episode owns it


async def test_admission_waits_for_capacity_and_overcommits_cpu() -> None:
    admission = Admission(cpus=2, memory_mb=1000, cpu_overcommit=2.0)
    order: list[str] = []
    release = asyncio.Event()

    async def episode(name: str, cpus: float, memory: int) -> None:
        async with admission.admit(cpus, memory):
            order.append(f"start {name}")
            await release.wait()
        order.append(f"end {name}")

    tasks = [asyncio.create_task(episode(n, 1, 400)) for n in "ab"]
    await settle()
    late = asyncio.create_task(episode("c", 1, 400))  # memory 1200 > 1000: must wait
    await settle()
    assert order == ["start a", "start b"]
    assert admission.used_cpus == 2
    release.set()
    await asyncio.gather(*tasks, late)
    assert order.index("start c") > order.index("end a")
    assert admission.used_cpus == 0


async def test_admission_admits_an_oversized_task_alone() -> None:
    admission = Admission(cpus=1, memory_mb=100, cpu_overcommit=1.0)
    async with admission.admit(8, 10_000):
        assert admission.used_memory_mb == 10_000
