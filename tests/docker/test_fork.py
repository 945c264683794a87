"""Copies of one warm environment (``sandbox/docker/fork.py``) on the Docker engine: each
answers from its own copy of the seeded database, and none sees another's writes, processes
or network (their sidecars share the group's outbound network, on which they cannot reach each
other). A database whose data is in its volume is copied from its own image, started held at a
gate while the parent warms; a sidecar that wrote elsewhere is copied from a snapshot, which is
labelled for the reaper and removed on close."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from envfarm.plan.models import JobChoices, SandboxSpec
from envfarm.plan.planner import plan_episode
from envfarm.sandbox.docker import fork_worth
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.environment import DockerEnvironment
from envfarm.sandbox.docker.fork import DockerWarmParent
from envfarm.sandbox.docker.fork_group import GroupOutbound
from envfarm.sandbox.docker.labels import (
    LABEL_KIND,
    LABEL_OWNER,
    LABEL_RUN,
    LABEL_TASK,
    owner_label,
)
from envfarm.sandbox.fork import WarmParent
from envfarm.spec.task import load_task
from tests.waiting import until

pytestmark = pytest.mark.asyncio(loop_scope="session")

SEEDED = Path(__file__).resolve().parents[2] / "bench" / "tasks" / "seeded-db"
ROWS = 2000
COUNT = "psql -tAc 'SELECT count(*) FROM items'"
PROCESSES = "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '"


SMALL = (SEEDED / "environment" / "docker-compose.yaml").read_text().replace("4000000", str(ROWS))


async def warm_parent(
    root: Path, compose: str, run_id: str, *, files: Path | None = None
) -> tuple[DockerBackend, SandboxSpec, DockerWarmParent]:
    """The warm parent of a group of two of a copy of the seeded task with ``compose`` for its
    compose file (and the directory ``files`` beside it), begun."""
    shutil.copytree(SEEDED, root)
    (root / "environment" / "docker-compose.yaml").write_text(compose)
    if files is not None:
        shutil.copytree(files, root / "environment" / files.name)
    backend = DockerBackend()
    plan = plan_episode(load_task(root), JobChoices(group_size=2), facts=await backend.facts())
    image = await backend.prepare(plan.sandbox)
    parent = backend.warm_parent(plan.sandbox, image, run_id=run_id)
    assert isinstance(parent, DockerWarmParent)
    return backend, plan.sandbox, parent


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def copies(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[WarmParent, DockerEnvironment, DockerEnvironment]]:
    root = tmp_path_factory.mktemp("fork") / "seeded-db"
    patch = pytest.MonkeyPatch()  # 2000 rows are seeded at once: forked all the same
    patch.setattr(fork_worth, "MIN_SAVED_S", 0.0)
    _, spec, parent = await warm_parent(root, SMALL, "test-fork")
    assert spec.fork
    try:  # both begun while the parent warms
        first, second = await asyncio.gather(parent.fork(), parent.fork())
        assert await parent.frozen() is None
    finally:
        patch.undo()
    assert isinstance(first, DockerEnvironment)
    assert isinstance(second, DockerEnvironment)
    try:
        yield parent, first, second
    finally:
        await first.stop()
        await second.stop()
        await parent.close()


async def test_every_copy_answers_from_the_seeded_data(
    copies: tuple[WarmParent, DockerEnvironment, DockerEnvironment],
) -> None:
    _, first, second = copies
    for copy in (first, second):
        result = await copy.exec(COUNT, timeout=60)
        assert (result.exit_code, result.stdout.strip()) == (0, str(ROWS)), result.stderr
        logs = bytes(docker_client().containers.get(copy.sidecar_ids["db"]).logs())
        assert b"01-seed.sh" not in logs, "the copy seeded its database again"


async def test_one_copys_writes_and_processes_are_invisible_to_another(
    copies: tuple[WarmParent, DockerEnvironment, DockerEnvironment],
) -> None:
    _, first, second = copies
    wrote = await first.exec(
        "psql -c 'DELETE FROM items WHERE id <= 10' && echo mine > /app/mine.txt "
        "&& (sleep 4242 >/dev/null 2>&1 &)",
        timeout=60,
    )
    assert wrote.exit_code == 0, wrote.stderr
    assert (await first.exec(COUNT)).stdout.strip() == str(ROWS - 10)
    assert (await second.exec(COUNT)).stdout.strip() == str(ROWS)
    assert (await second.exec("test -e /app/mine.txt")).exit_code == 1
    assert "sleep 4242" in (await first.exec(PROCESSES)).stdout
    assert "sleep 4242" not in (await second.exec(PROCESSES)).stdout


async def test_copies_have_their_own_network_containers_and_volumes(
    copies: tuple[WarmParent, DockerEnvironment, DockerEnvironment],
) -> None:
    _, first, second = copies
    assert first.network_id != second.network_id
    assert first.container_id != second.container_id
    assert first.sidecar_ids["db"] != second.sidecar_ids["db"]
    assert not set(first.volumes) & set(second.volumes)
    address = (await second.exec("getent hosts db | cut -d' ' -f1")).stdout.strip()
    own = (await first.exec("getent hosts db | cut -d' ' -f1")).stdout.strip()
    assert address
    assert own
    reach = await first.exec(f"timeout 3 bash -c '</dev/tcp/{address}/5432'", timeout=30)
    assert reach.exit_code != 0, "a copy reached its sibling's database"
    # The sidecars' outbound network is the group's, where containers cannot reach each other.
    outbound = first.surroundings.outbound_name
    assert outbound is not None
    assert outbound == second.surroundings.outbound_name
    client = docker_client()
    networks = client.api.inspect_container(second.sidecar_ids["db"])["NetworkSettings"]
    sibling = networks["Networks"][outbound]["IPAddress"]
    own_db = client.containers.get(first.sidecar_ids["db"])
    probe = own_db.exec_run(["timeout", "3", "bash", "-c", f"</dev/tcp/{sibling}/5432"])
    assert probe.exit_code in (1, 124), probe  # refused or dropped: not a missing bash


async def test_a_database_with_its_data_in_a_volume_is_copied_from_its_own_image(
    copies: tuple[WarmParent, DockerEnvironment, DockerEnvironment],
) -> None:
    parent, first, _ = copies
    assert isinstance(parent, DockerWarmParent)
    started = parent.parent.surroundings.service_images or {}
    assert parent.snapshots == []  # nothing committed: its file system held nothing to keep
    assert parent.snapshot_images["db"] == started["db"]
    db = docker_client().api.inspect_container(first.sidecar_ids["db"])
    assert db["Config"]["Entrypoint"][:2] == ["/bin/sh", "-c"]  # started held, at its gate
    top = docker_client().api.top(first.sidecar_ids["db"], ps_args="-eo pid,args")
    processes = [args for _, args in top["Processes"]]  # in no particular order
    init = [p for p in processes if p.startswith("/sbin/docker-init")]
    others = [p for p in processes if p not in init]
    assert len(init) == 1, processes
    assert "trap" in init[0], processes  # its init's argv shows the hold
    assert "postgres" in others, processes  # the shell became the service
    assert not [p for p in others if "trap" in p or p.startswith("sleep")], processes


async def test_closing_the_parent_removes_its_group_network(
    copies: tuple[WarmParent, DockerEnvironment, DockerEnvironment],
) -> None:
    parent, first, second = copies
    outbound = first.surroundings.outbound_name
    await first.stop()
    await second.stop()
    await parent.close()
    assert not docker_client().api.networks(names=[outbound])


STATEFUL = """services:
  main:
    depends_on:
      state:
        condition: service_healthy
  state:
    image: postgres:15
    entrypoint: ["sh", "-c"]
    command: ["[ -s /srv/token ] || od -An -N8 -tx1 /dev/urandom | tr -d ' \\n' > /srv/token; \
      exec sleep infinity"]
    volumes:
      - data:/data
    healthcheck:
      test: ["CMD-SHELL", "test -s /srv/token"]
      interval: 1s
volumes:
  data:
"""


async def test_a_sidecar_that_wrote_outside_its_volumes_is_copied_from_a_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fork_worth, "MIN_SAVED_S", 0.0)
    _, _, parent = await warm_parent(tmp_path / "stateful", STATEFUL, "test-fork-state")
    copies = await asyncio.gather(parent.fork(), parent.fork())
    try:
        assert await parent.frozen() is None
        snapshot = parent.snapshot_images["state"]
        assert parent.snapshots == [snapshot]
        labels = docker_client().images.get(snapshot).labels
        assert (labels[LABEL_KIND], labels[LABEL_OWNER]) == ("fork", owner_label())
        tokens = []
        for copy in copies:  # made again from the snapshot, not let go from its gate
            assert isinstance(copy, DockerEnvironment)
            state = docker_client().containers.get(copy.sidecar_ids["state"])
            assert state.attrs["Image"] == snapshot
            tokens.append(state.exec_run(["cat", "/srv/token"]).output)
        assert tokens[0] == tokens[1] != b""  # the warm one's, not one written by each copy
    finally:
        for copy in copies:
            await copy.stop()
        await parent.close()
    remaining = docker_client().api.images(filters={"label": f"{LABEL_KIND}=fork"}, quiet=True)
    assert snapshot not in remaining


async def test_copies_begun_from_a_parent_not_worth_forking_finish_cold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fork_worth, "MIN_SAVED_S", 3600.0)
    backend, spec, parent = await warm_parent(tmp_path / "seeded-db", SMALL, "test-fork-cold")
    copy = await parent.fork()
    try:
        reason = await parent.frozen()
        assert reason is not None
        assert "slowest service (db)" in reason
        assert isinstance(copy, DockerEnvironment)
        result = await copy.exec(COUNT, timeout=60)
        assert (result.exit_code, result.stdout.strip()) == (0, str(ROWS)), result.stderr
        logs = bytes(docker_client().containers.get(copy.sidecar_ids["db"]).logs())
        assert b"01-seed.sh" in logs, "a cold copy seeds its own database"
        assert parent.snapshot_images == {}
        assert parent.parent.sidecar_ids == {}  # stopped once it was not worth forking
        again = backend.warm_parent(spec, await backend.prepare(spec), run_id="test-fork-cold")
        assert isinstance(again, DockerWarmParent)
        assert "an earlier warm start" in (await again.frozen() or "")
        assert again.parent.network_id is None  # the next job does not start one to decide
        await again.close()
    finally:
        await copy.stop()
        await parent.close()


async def test_a_group_gets_as_many_outbound_networks_as_its_sidecars_need() -> None:
    labels = {LABEL_KIND: "network", "io.envfarm.managed": "true", LABEL_OWNER: owner_label()}
    name = f"envfarm-test-{uuid.uuid4().hex[:8]}-group-out"
    group = GroupOutbound(name, labels)
    group.capacity = 2  # endpoints per network: a /27's 25, here 2
    try:
        names = [await group.network(f"copy{i}", 1) for i in range(3)]
        assert names == [name, name, f"{name}-1"]
        assert await group.network("copy3", 2) == f"{name}-2"  # no room left in the others
        for index in range(4):
            await group.release(f"copy{index}", [])
    finally:
        await group.close()
    left = docker_client().networks.list(names=[name])
    assert [n.name for n in left if (n.name or "").startswith(name)] == []


async def test_a_copy_cancelled_while_its_parent_warms_leaves_nothing(
    tmp_path: Path,
) -> None:
    never_ready = SMALL.replace('"pg_isready -U app -d shop"', '"exit 1"')
    _, spec, parent = await warm_parent(tmp_path / "seeded-db", never_ready, "test-fork-cancel")
    copy = asyncio.ensure_future(parent.fork())
    managed: dict[str, str | list[str] | bool] = {
        "label": [f"{LABEL_TASK}={spec.task_id}", f"{LABEL_RUN}=test-fork-cancel"]
    }

    def copy_started() -> bool:  # its main container is on its own network
        for network in docker_client().networks.list(filters=managed):
            name = network.name or ""
            if not name.startswith(f"envfarm-{parent.parent_id}"):
                return bool(docker_client().api.inspect_network(name).get("Containers"))
        return False

    try:  # the copy's main container is made while the parent waits for its database
        await until(copy_started)
        copy.cancel()  # ends without the parent's decision (its database never is ready);
        # the bound only guards against a hang
        with pytest.raises(asyncio.CancelledError):
            async with asyncio.timeout(120):
                await copy
        assert not parent.snapshot_images  # never frozen: the copy did not wait for it
    finally:
        await parent.close()
    assert docker_client().containers.list(all=True, filters=managed) == []
    assert docker_client().volumes.list(filters=managed) == []
    assert docker_client().networks.list(filters=managed) == []


SHELLESS = """services:
  main:
    depends_on:
      plain:
        condition: service_started
  plain:
    build: ./plain
    entrypoint: ["sleep"]
    command: ["infinity"]
    volumes:
      - data:/data
volumes:
  data:
"""


async def test_a_sidecar_without_a_shell_is_not_held_but_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()  # a shell-less image: nothing can hold it at a gate
    (plain / "Dockerfile").write_text('FROM postgres:15\nRUN ["/bin/rm", "/bin/sh"]\n')
    monkeypatch.setattr(fork_worth, "MIN_SAVED_S", 0.0)
    root = tmp_path / "shellless"
    _, _, parent = await warm_parent(root, SHELLESS, "test-fork-shellless", files=plain)
    copy = await parent.fork()
    try:
        assert await parent.frozen() is None
        assert isinstance(copy, DockerEnvironment)
        sidecar = docker_client().api.inspect_container(copy.sidecar_ids["plain"])
        assert sidecar["State"]["Running"]
        assert sidecar["Config"]["Entrypoint"] == ["sleep"]  # made again, not held
    finally:
        await copy.stop()
        await parent.close()
