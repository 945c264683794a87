"""A job's own settings through the real controller and its store: the runtimes a server lets a
job ask for, and the fields kept with the job as it was submitted."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfarm.controller.groups import finalize_group
from envfarm.controller.service import Controller
from envfarm.errors import JobError
from envfarm.models.jobs import JobPolicy, JobRequest
from envfarm.settings import Settings
from envfarm.spec.task import Task, load_task
from envfarm.store.store import Store

pytestmark = pytest.mark.asyncio(loop_scope="session")


def make_task(root: Path) -> Task:
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "task.toml").write_text("")
    (root / "instruction.md").write_text("do it\n")
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "tests" / "test.sh").write_text("true\n")
    return load_task(root)


def job(task: Task, **fields: object) -> JobRequest:
    return JobRequest.model_validate(
        {"tasks": [task.id], "policy": JobPolicy(base_url="oracle"), **fields}
    )


async def test_a_runtime_the_server_does_not_allow_is_refused_naming_the_field(
    tmp_path: Path,
) -> None:
    task = make_task(tmp_path / "t")
    store = await Store.open("sqlite://", finalize=finalize_group)
    try:
        strict = Controller(store, {task.id: task}, settings=Settings(runtime="runsc"))
        with pytest.raises(JobError, match=r"runtime 'kata' is not allowed.*'runsc'") as refused:
            await strict.submit(job(task, runtime="kata"))
        assert refused.value.field == "runtime"
        assert await strict.submit(job(task, runtime="runsc"))
        assert await strict.submit(job(task))
        lenient = Controller(store, {task.id: task}, settings=Settings(allowed_runtimes=("kata",)))
        job_id = await lenient.submit(job(task, runtime="kata", verifier_network="none"))
        kept = (await lenient.job(job_id)).request
        assert (kept["runtime"], kept["verifier_network"]) == ("kata", "none")
        bare = Controller(store, {task.id: task}, settings=Settings())
        with pytest.raises(JobError, match=r"allowed: none \(the engine's default only\)"):
            await bare.submit(job(task, runtime="runc"))
    finally:
        await store.close()
