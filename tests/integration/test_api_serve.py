"""``envfarm serve`` as a real process (SQLite and PostgreSQL stores, the real Docker engine):
a trainer submits an oracle job, consumes it with the client, and the HTTP contract holds."""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pyarrow.parquet as pq
import pytest
import pytest_asyncio
from click.testing import CliRunner

from envfarm.cli.main import cli
from envfarm.client import ApiError, EnvfarmClient
from envfarm.models.jobs import DeliveredGroup
from tests.integration.serve_process import ServeProcess

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
TASKS = ("word-count-cli", "jq-log-summary")
TASK_IDS = [f"envfarm/{name}" for name in TASKS]
TOKEN = "integration-token"
GROUP_SIZE = 2


@pytest.fixture(scope="module")
def served(db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    workdir = tmp_path_factory.mktemp("serve")
    for name in TASKS:
        shutil.copytree(REPO / "tasks" / name, workdir / "tasks" / name)
    server = ServeProcess(
        workdir, "--db", db_url, "--tasks", "tasks", "--data-dir", "data", "--concurrency", "4",
        token=TOKEN,
    )  # fmt: skip
    server.start()
    try:
        yield server
        status = server.stop(signal.SIGTERM)
        assert status == 0, server.output()
    finally:
        server.kill()


@pytest_asyncio.fixture(loop_scope="session")
async def client(served: ServeProcess) -> AsyncIterator[EnvfarmClient]:
    async with EnvfarmClient(served.url, TOKEN) as api:
        yield api


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def oracle_job(served: ServeProcess) -> tuple[str, list[DeliveredGroup]]:
    """An oracle job over both tasks, consumed to its end by a trainer that acks."""
    async with EnvfarmClient(served.url, TOKEN) as api:
        job_id = await api.submit(
            {"tasks": TASK_IDS, "policy": {"base_url": "oracle"}, "group_size": GROUP_SIZE}
        )
        groups = [group async for group in api.groups(job_id, consumer="trainer", wait_s=10)]
    return job_id, groups


async def test_oracle_job_is_delivered_whole_graded_and_counted(
    client: EnvfarmClient, oracle_job: tuple[str, list[DeliveredGroup]]
) -> None:
    job_id, groups = oracle_job
    assert [g.cursor for g in groups] == sorted({g.cursor for g in groups})
    assert sorted(g.task_id for g in groups) == sorted(TASK_IDS)
    trajectories = [t for g in groups for t in g.trajectories]
    assert len(trajectories) == len(TASKS) * GROUP_SIZE
    assert len({t["trajectory_id"] for t in trajectories}) == len(trajectories)
    for group in groups:
        assert len(group.trajectories) == GROUP_SIZE
        assert group.zero_variance is True
        for trajectory in group.trajectories:
            assert trajectory["schema"] == "envfarm.trajectory/1"
            assert (trajectory["job_id"], trajectory["group_id"]) == (job_id, group.group_id)
            assert trajectory["task_id"] == group.task_id
            assert trajectory["reward"]["valid"] is True
            assert trajectory["reward"]["value"] == 1.0
            assert trajectory["advantage"] == 0.0
    view = await client.job(job_id)
    assert view.status == "completed"
    counts = view.counts
    assert (counts.episodes, counts.completed, counts.valid) == (4, 4, 4)
    assert (counts.infra_errors, counts.groups_completed, counts.mean_reward) == (0, 2, 1.0)
    assert view.last_cursor == groups[-1].cursor
    assert job_id in [job.id for job in await client.jobs()]


async def test_acked_groups_are_not_delivered_again_and_consumers_are_independent(
    client: EnvfarmClient, oracle_job: tuple[str, list[DeliveredGroup]]
) -> None:
    job_id, groups = oracle_job
    assert [g async for g in client.groups(job_id, consumer="trainer", wait_s=0)] == []
    again = [g async for g in client.groups(job_id, consumer="auditor", ack=False, wait_s=0)]
    assert again == groups
    streamed = [g async for g in client.stream(job_id, consumer="streamer")]
    assert streamed == groups
    assert [g async for g in client.stream(job_id, consumer="streamer")] == []
    page = await client.page(job_id, after=groups[0].cursor, consumer="auditor")
    assert page.groups == groups[1:]


async def test_errors_unknown_job_unknown_task_bad_body_no_token(
    served: ServeProcess, client: EnvfarmClient
) -> None:
    with pytest.raises(ApiError) as raised:
        await client.job("no-such-job")
    assert raised.value.status == 404
    with pytest.raises(ApiError) as raised:
        await client.submit({"tasks": [TASK_IDS[0], "nope"], "policy": {"base_url": "oracle"}})
    assert raised.value.status == 422
    assert raised.value.errors[0]["field"] == "tasks[1]"
    with pytest.raises(ApiError) as raised:
        await client.submit({"tasks": TASK_IDS, "policy": {"base_url": ["oracle"]}})
    assert raised.value.status == 422
    assert raised.value.errors[0]["field"] == "policy.base_url"
    async with EnvfarmClient(served.url) as anonymous:
        assert await anonymous.healthy()
        with pytest.raises(ApiError) as raised:
            await anonymous.tasks()
    assert raised.value.status == 401
    assert raised.value.problem["type"] == "urn:envfarm:problem:unauthorized"


async def test_tasks_versions_metrics_and_job_controls(
    served: ServeProcess, client: EnvfarmClient, oracle_job: tuple[str, list[DeliveredGroup]]
) -> None:
    assert sorted(task.id for task in await client.tasks()) == sorted(TASK_IDS)
    await client.publish_version("step-1")
    job_id, _ = oracle_job
    with pytest.raises(ApiError) as raised:
        await client.pause(job_id)
    assert raised.value.status == 409
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        aiohttp.ClientSession(headers=headers) as session,
        session.get(served.url + "/metrics") as response,
    ):
        text = await response.text()
    assert response.status == 200
    assert 'envfarm_episodes{state="done"}' in text
    assert "envfarm_sandbox_start_seconds_count" in text
    assert 'envfarm_policy_version_info{policy_version="step-1"} 1.0' in text


def test_export_writes_parquet_and_jsonl_from_the_server(
    served: ServeProcess, oracle_job: tuple[str, list[DeliveredGroup]], tmp_path: Path
) -> None:
    job_id, groups = oracle_job
    env = {"ENVFARM_TOKEN": TOKEN}
    for name in ("out.parquet", "out.jsonl"):
        out = tmp_path / name
        args = ["export", "--api", served.url, "--job", job_id, "--out", str(out)]
        result = CliRunner().invoke(cli, args, env=env)
        assert result.exit_code == 0, result.output
    table = pq.read_table(tmp_path / "out.parquet").to_pylist()
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    delivered = [t for g in groups for t in g.trajectories]
    assert lines == delivered
    assert [row["trajectory_id"] for row in table] == [t["trajectory_id"] for t in delivered]
    assert {row["reward_value"] for row in table} == {1.0}
    assert [json.loads(row["turns"]) for row in table] == [t["turns"] for t in delivered]
    assert [row["cursor"] for row in table] == [g.cursor for g in groups for _ in g.trajectories]


async def test_jobs_and_groups_survive_a_graceful_restart(
    served: ServeProcess, oracle_job: tuple[str, list[DeliveredGroup]]
) -> None:
    job_id, groups = oracle_job
    assert served.stop(signal.SIGTERM) == 0, served.output()
    served.start()
    async with EnvfarmClient(served.url, TOKEN) as api:
        assert (await api.job(job_id)).status == "completed"
        assert [g async for g in api.groups(job_id, consumer="trainer", wait_s=0)] == []
        assert [g async for g in api.groups(job_id, consumer="late", ack=False)] == groups
