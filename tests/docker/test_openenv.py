"""The step API through an unmodified OpenEnv client (``openenv-core``) against ``envfarm serve``.

One server (a real process, the real engine) serves every test here: two episode slots, and
sessions abandoned after a few idle seconds.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import docker
import pytest
from openenv.core import GenericEnvClient
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from envfarm.integrations.trl_environment import EnvfarmEnvironment
from envfarm.sandbox.docker.labels import LABEL_RUN
from envfarm.store.store import Store
from tests.conftest import REPO
from tests.integration.serve_process import ServeProcess
from tests.step_sessions import PG_TASK, migrate_pg_schema

pytestmark = pytest.mark.asyncio(loop_scope="session")
TOKEN = "step-api-secret-7c1f"
TASK = REPO / "tasks" / "word-count-cli"
IDLE_S = 15  # longer than a reset waits for a slot (10 s)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp("openenv")
    for task in (TASK, PG_TASK):
        shutil.copytree(task, root / "tasks" / task.name)
    args = ["--tasks", "tasks", "--data-dir", "data", "--concurrency", "2",
            "--session-idle", str(IDLE_S), "--access-log"]  # fmt: skip
    process = ServeProcess(root, *args, token=TOKEN).start()
    yield process
    assert process.stop() == 0, process.output()
    assert TOKEN not in process.output()


def base(server: ServeProcess, token: str = TOKEN) -> str:
    return f"{server.url}/v1/openenv/{token}"


def ws_url(server: ServeProcess, path: str) -> str:
    return server.url.replace("http://", "ws://") + path


def containers(job_id: str) -> list[str]:
    found = docker.from_env().containers.list(all=True, filters={"label": f"{LABEL_RUN}={job_id}"})
    return [c.name or "" for c in found]


async def recorded(server: ServeProcess, job_id: str) -> dict[str, Any]:
    """The job's one trajectory, once the server's store has it."""
    store = await Store.open(f"sqlite:///{server.workdir / 'data' / 'envfarm.db'}")
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = await store.trajectories(job_id)
            if found:
                [trajectory] = found
                return trajectory
            await asyncio.sleep(0.2)
    finally:
        await store.close()
    raise AssertionError(f"{job_id} was never recorded:\n{server.output()}")


async def gone(job_id: str) -> list[str]:
    """The job's containers, after giving a background teardown its time."""
    deadline = time.monotonic() + 60
    left = containers(job_id)
    while left and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        left = containers(job_id)
    return left


async def test_an_openenv_client_solves_the_task_and_an_empty_session_does_not(
    server: ServeProcess,
) -> None:
    solve = (TASK / "solution" / "solve.sh").read_text()
    async with GenericEnvClient(base_url=base(server), message_timeout_s=300) as env:
        opened = await env.reset(task="word-count-cli")
        assert not opened.done
        assert opened.reward is None
        assert "/app/wc.py" in opened.observation["instruction"]
        names = [tool["function"]["name"] for tool in opened.observation["tools"]]
        assert names == ["bash", "read_file", "write_file", "edit_file", "submit"]
        ran = await env.step({"tool": "bash", "arguments": {"command": solve}})
        assert (ran.done, ran.observation["exit_code"]) == (False, 0)
        read = await env.step({"tool": "read_file", "arguments": {"path": "wc.py"}})
        assert "def count" in read.observation["output"]
        submitted = await env.step({"tool": "submit", "arguments": {}})
        state = await env.state()
        solved_job = opened.observation["job_id"]

        empty = await env.reset(task="envfarm/word-count-cli", seed=3)
        nothing = await env.step({"tool": "submit"})
        with pytest.raises(RuntimeError, match="has ended"):
            await env.step({"tool": "bash", "arguments": {"command": "true"}})
    assert submitted.done
    assert submitted.reward == 1.0
    assert submitted.observation["reward_valid"] is True
    assert submitted.observation["stop_reason"] == "submitted"
    assert state["step_count"] == 3
    assert state["done"] is True
    assert nothing.done
    assert nothing.reward is not None
    assert nothing.reward < 1.0
    trajectory = await recorded(server, solved_job)
    assert trajectory["agent"]["name"] == "driven"
    assert trajectory["reward"]["value"] == 1.0
    assert [t["tool_results"][0]["name"] for t in trajectory["turns"]] == [
        "bash", "read_file", "submit"
    ]  # fmt: skip
    assert trajectory["messages"][0]["content"] == opened.observation["instruction"]
    viewer = f"{server.url}/ui/runs/{solved_job}/t/{trajectory['trajectory_id']}"
    async with (
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
        http.get(viewer) as page,
    ):
        html = await page.text()
        assert page.status == 200, html
    assert "bash" in html
    assert "driven" in html
    empty_trajectory = await recorded(server, empty.observation["job_id"])
    assert empty_trajectory["provenance"]["seed"] == 3
    assert await gone(solved_job) == []
    assert await gone(empty.observation["job_id"]) == []


async def test_a_step_after_the_end_is_an_error(server: ServeProcess) -> None:
    async with connect(ws_url(server, f"/v1/openenv/{TOKEN}/ws")) as ws:
        await ws.send(json.dumps({"type": "step", "data": {"tool": "bash"}}))
        before = json.loads(await ws.recv())
        await ws.send(json.dumps({"type": "reset", "data": {"task": "word-count-cli"}}))
        json.loads(await ws.recv())
        await ws.send(json.dumps({"type": "step", "data": {"tool": "submit"}}))
        json.loads(await ws.recv())
        await ws.send(json.dumps({"type": "step", "data": {"tool": "submit"}}))
        after = json.loads(await ws.recv())
        await ws.send(json.dumps({"type": "step", "data": {"arguments": {}}}))
        shapeless = json.loads(await ws.recv())
        await ws.send(json.dumps({"type": "reset", "data": {"task": "no-such-task"}}))
        unknown = json.loads(await ws.recv())
    assert before["type"] == "error"
    assert "send reset first" in before["data"]["message"]
    assert after["type"] == "error"
    assert "has ended" in after["data"]["message"]
    assert shapeless["data"]["code"] == "VALIDATION_ERROR"
    assert "tool" in shapeless["data"]["message"]
    assert unknown["data"]["code"] == "VALIDATION_ERROR"
    assert "no-such-task" in unknown["data"]["message"]


async def test_wrong_or_missing_tokens_are_refused_and_a_bearer_header_works(
    server: ServeProcess,
) -> None:
    with pytest.raises(ConnectionError):
        async with GenericEnvClient(base_url=base(server, "wrong-token")) as env:
            await env.reset(task="word-count-cli")
    for path in ("/v1/openenv/ws", f"/v1/openenv/{TOKEN[:-1]}/ws"):
        with pytest.raises(InvalidStatus) as refused:
            async with connect(ws_url(server, path)):
                pass
        assert refused.value.response.status_code == 403
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with connect(ws_url(server, "/v1/openenv/ws"), additional_headers=headers) as ws:
        await ws.send(json.dumps({"type": "state"}))
        assert json.loads(await ws.recv())["type"] == "state"
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{base(server)}/health") as answer,
        http.get(f"{base(server, 'wrong-token')}/health") as wrong,
    ):
        health = await answer.json()
        assert wrong.status == 401
    assert health == {"status": "healthy"}
    assert "wrong-token" not in server.output()


async def test_an_abandoned_session_is_reclaimed_and_recorded_ungraded(
    server: ServeProcess,
) -> None:
    ws = await connect(ws_url(server, f"/v1/openenv/{TOKEN}/ws"))
    await ws.send(json.dumps({"type": "reset", "data": {"task": "word-count-cli"}}))
    dropped_job = json.loads(await ws.recv())["data"]["observation"]["job_id"]
    echo = {"tool": "bash", "arguments": {"command": "echo hi"}}
    await ws.send(json.dumps({"type": "step", "data": echo}))
    await ws.recv()
    await ws.close()  # without a close message: the trainer went away

    async with connect(ws_url(server, f"/v1/openenv/{TOKEN}/ws")) as idle:
        await idle.send(json.dumps({"type": "reset", "data": {"task": "word-count-cli"}}))
        idle_job = json.loads(await idle.recv())["data"]["observation"]["job_id"]
        notice = json.loads(await asyncio.wait_for(idle.recv(), IDLE_S * 4))
    dropped = await recorded(server, dropped_job)
    idled = await recorded(server, idle_job)
    for trajectory in (dropped, idled):
        assert trajectory["error"]["type"] == "SessionAbandoned"
        assert trajectory["error"]["infrastructure"] is False
        assert trajectory["reward"]["valid"] is False
        assert trajectory["reward"]["value"] is None
    assert [t["tool_results"][0]["output"] for t in dropped["turns"]] == ["hi\n[exit code: 0]"]
    assert "idle" in notice["data"]["message"]
    assert "idle" in idled["error"]["message"]
    assert await gone(dropped_job) == []
    assert await gone(idle_job) == []


async def test_sessions_count_against_the_servers_concurrency(server: ServeProcess) -> None:
    url = ws_url(server, f"/v1/openenv/{TOKEN}/ws")
    async with connect(url) as one, connect(url) as two, connect(url) as three:
        answers = []
        for ws in (one, two, three):
            await ws.send(json.dumps({"type": "reset", "data": {"task": "word-count-cli"}}))
            answers.append(json.loads(await ws.recv()))
        await one.send(json.dumps({"type": "close"}))
    assert [a["type"] for a in answers] == ["observation", "observation", "error"]
    assert answers[2]["data"]["code"] == "CAPACITY_REACHED"


def trl_rollout(server: ServeProcess, solve: str | None) -> tuple[str, str, float | None]:
    """One rollout as TRL's GRPOTrainer drives an ``environment_factory`` instance."""
    with EnvfarmEnvironment(server.url, token=TOKEN) as env:
        instruction = env.reset(task="word-count-cli", prompt=[{"role": "user", "content": "x"}])
        output = env.bash(solve) if solve is not None else env.read_file("missing.txt")
        return instruction, output, env.get_reward()


async def test_the_trl_environment_class_runs_tools_and_grades(server: ServeProcess) -> None:
    solve = (TASK / "solution" / "solve.sh").read_text()
    instruction, output, solved = await asyncio.to_thread(trl_rollout, server, solve)
    _, missing, unsolved = await asyncio.to_thread(trl_rollout, server, None)
    assert "/app/wc.py" in instruction
    assert output.endswith("[exit code: 0]")
    assert solved == 1.0
    assert "no such file: /app/missing.txt" in missing
    assert unsolved is not None
    assert unsolved < 1.0


async def test_a_new_reset_abandons_the_unfinished_episode(server: ServeProcess) -> None:
    async with connect(ws_url(server, f"/v1/openenv/{TOKEN}/ws")) as ws:
        jobs = []
        for _ in range(2):
            await ws.send(json.dumps({"type": "reset", "data": {"task": "word-count-cli"}}))
            jobs.append(json.loads(await ws.recv())["data"]["observation"]["job_id"])
        await ws.send(json.dumps({"type": "close"}))
    first, second = [await recorded(server, job) for job in jobs]
    assert first["error"]["type"] == "SessionAbandoned"
    assert "reset before submit" in first["error"]["message"]
    assert "closed before submit" in second["error"]["message"]


async def test_a_server_stopped_under_a_session_records_it_ungraded(tmp_path: Path) -> None:
    shutil.copytree(TASK, tmp_path / "tasks" / TASK.name)
    server = ServeProcess(tmp_path, "--tasks", "tasks", "--data-dir", "data", token=TOKEN).start()
    try:
        ws = await connect(ws_url(server, f"/v1/openenv/{TOKEN}/ws"))
        await ws.send(json.dumps({"type": "reset", "data": {"task": "word-count-cli"}}))
        job_id = json.loads(await ws.recv())["data"]["observation"]["job_id"]
    finally:
        code = await asyncio.to_thread(server.stop)
    await ws.close()
    assert code == 0, server.output()
    trajectory = await recorded(server, job_id)
    assert trajectory["error"]["type"] == "SessionAbandoned"
    assert trajectory["reward"]["valid"] is False
    assert containers(job_id) == []


async def test_a_session_on_a_task_with_services_is_graded_beside_them(
    server: ServeProcess,
) -> None:
    job_id = await migrate_pg_schema(base(server))
    assert await gone(job_id) == []
