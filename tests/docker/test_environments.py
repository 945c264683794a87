"""Compose environments on the real engine: service images, networking, gating, teardown."""

from __future__ import annotations

import asyncio
import ipaddress
import signal
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from envfarm.errors import SandboxStartError, ServiceFailed
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.environment import DockerEnvironment
from envfarm.sandbox.docker.labels import LABEL_RUN
from envfarm.sandbox.docker.networks import DEFAULT_POOL, DEFAULT_PREFIX
from envfarm.sandbox.docker.reaper import reap_orphans
from envfarm.sandbox.docker.services import LABEL_ENVIRONMENT
from envfarm.spec import load_task
from tests.plans import sandbox_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")
REPO = Path(__file__).resolve().parents[2]

PG = """
  db:
    image: postgres:15
    environment:
      POSTGRES_USER: app
      POSTGRES_PASSWORD: s3cret
      POSTGRES_DB: shop
    volumes:
      - ./initdb:/docker-entrypoint-initdb.d:ro
    healthcheck:
      test: ["CMD-SHELL", "pg_isready -U app -d shop"]
      interval: 1s
      retries: 30
"""
CACHE = """
  cache:
    image: redis:7
    command: redis-server --appendonly yes
    healthcheck:
      test: ["CMD", "redis-cli", "ping"]
      interval: 1s
      retries: 10
"""

DockerFilters = dict[str, str | list[str] | bool]
"""The shape the docker SDK takes for ``filters``."""


def make_task(
    root: Path,
    services: str,
    *,
    main: str = "image: postgres:15",
    toml: str = "",
    extra: str = "",
) -> Path:
    """A task whose compose file has ``main`` (its keys) plus the ``services`` given."""
    (root / "environment" / "initdb").mkdir(parents=True, exist_ok=True)
    (root / "tests").mkdir(exist_ok=True)
    (root / "task.toml").write_text(f'[task]\nname = "test/{root.name}"\n{toml}')
    (root / "instruction.md").write_text("Use the services.\n")
    (root / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (root / "environment" / "initdb" / "01-schema.sql").write_text(
        "CREATE TABLE items (name text); INSERT INTO items VALUES ('seeded');\n"
    )
    (root / "environment" / "initdb" / "02-more.sh").write_text(
        'psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" '
        "-c \"INSERT INTO items VALUES ('from-sh-' || current_database())\"\n"
    )
    main_keys = textwrap.indent(textwrap.dedent(main).strip(), "    ")
    compose = f"services:\n  main:\n{main_keys}\n{services}{extra}"
    (root / "environment" / "docker-compose.yaml").write_text(compose)
    return root


async def environment(root: Path, run_id: str | None = None) -> DockerEnvironment:
    """A started-to-be environment; a unique run id keeps concurrent test runs apart."""
    run_id = run_id or f"test-env-{uuid.uuid4().hex[:8]}"
    task = load_task(root)
    backend = DockerBackend()
    sandbox = backend.create(
        sandbox_spec(task), await backend.prepare(sandbox_spec(task)), run_id=run_id
    )
    assert isinstance(sandbox, DockerEnvironment)
    return sandbox


def leftovers(env_id: str) -> list[str]:
    """Every container, network and volume of the environment still on the engine."""
    client = docker_client()
    label: DockerFilters = {"label": [f"{LABEL_ENVIRONMENT}={env_id}"]}
    containers = client.api.containers(all=True, filters=label)  # one call: no inspect of
    found = [f"container {c['Names'][0].lstrip('/')}" for c in containers]  # one going away
    found += [f"network {n['Name']}" for n in client.api.networks(filters=label)]
    volumes = client.api.volumes(filters=label).get("Volumes") or []
    return found + [f"volume {v['Name']}" for v in volumes]


async def run(sandbox: DockerEnvironment, command: str) -> str:
    result = await sandbox.exec(command, timeout=60)
    assert result.exit_code == 0, (command, result.stdout, result.stderr)
    return result.stdout.strip()


async def test_postgres_service_honours_the_official_conventions(tmp_path: Path) -> None:
    sandbox = await environment(make_task(tmp_path / "pg", PG))
    async with sandbox:
        query = (
            "PGPASSWORD=s3cret psql -h db -U app -d shop -tAc 'SELECT name FROM items ORDER BY 1'"
        )
        assert (await run(sandbox, query)).splitlines() == ["from-sh-shop", "seeded"]
        assert "accepting connections" in await run(sandbox, "pg_isready -h db -p 5432")
        wrong = await sandbox.exec("PGPASSWORD=nope psql -h db -U app -d shop -c 'SELECT 1'")
        assert wrong.exit_code != 0
        assert "password authentication failed" in wrong.stderr
        user = await run(
            sandbox, "PGPASSWORD=s3cret psql -h db -U app -d shop -tAc 'SELECT current_user'"
        )
        assert user == "app"
        fsync = "PGPASSWORD=s3cret psql -h db -U app -d shop -tAc 'SHOW fsync'"
        assert await run(sandbox, fsync) == "on"  # only the first start's init skips syncs


async def test_postgres_defaults_and_trust_mode(tmp_path: Path) -> None:
    services = """
  db:
    image: postgres
    environment: {POSTGRES_PASSWORD: pw}
    healthcheck: {test: ["CMD-SHELL", "pg_isready -U postgres"], interval: 1s, retries: 30}
  open:
    image: postgres:15-alpine
    environment: {POSTGRES_HOST_AUTH_METHOD: trust, POSTGRES_USER: guest}
    healthcheck: {test: ["CMD-SHELL", "pg_isready -U guest"], interval: 1s, retries: 30}
"""
    task = load_task(make_task(tmp_path / "pgdefaults", services))
    images = await DockerBackend().prepare(sandbox_spec(task))
    assert any("service db: postgres: Debian 12 has PostgreSQL 15" in w for w in images.warnings)
    sandbox = await environment(task.root)
    async with sandbox:
        default = "PGPASSWORD=pw psql -h db -U postgres -tAc 'SELECT current_database()'"
        assert await run(sandbox, default) == "postgres"
        trusted = "psql -h open -U guest -tAc 'SELECT current_database()' < /dev/null"
        assert await run(sandbox, trusted) == "guest"


async def test_postgres_from_the_built_cluster_matches_one_from_initdb(tmp_path: Path) -> None:
    """The first start copies the image's cluster unless initdb options are given; either way
    POSTGRES_USER is the bootstrap superuser, its password is asked for, and nothing of the
    copy's adoption is left."""
    services = PG + PG.replace("  db:", "  fresh:").replace(
        "      POSTGRES_DB: shop\n",
        "      POSTGRES_DB: shop\n      POSTGRES_INITDB_ARGS: --encoding=LATIN1 --locale=C\n",
    )
    sandbox = await environment(make_task(tmp_path / "pgtemplate", services))
    async with sandbox:
        facts = (
            "SELECT rolname FROM pg_roles WHERE oid = 10;"
            " SELECT count(*) FROM pg_roles WHERE rolname NOT LIKE 'pg\\_%';"
            " SELECT rolpassword LIKE 'SCRAM-SHA-256$%' FROM pg_authid WHERE rolname = 'app';"
            " SELECT name FROM items ORDER BY 1;"
            " SHOW server_encoding;"
        )
        for host, encoding in (("db", "UTF8"), ("fresh", "LATIN1")):
            query = f'PGPASSWORD=s3cret psql -h {host} -U app -d shop -tA -c "{facts}"'
            lines = (await run(sandbox, query)).splitlines()
            assert lines == ["app", "1", "t", "from-sh-shop", "seeded", encoding], host
            wrong = await sandbox.exec(f"PGPASSWORD=nope psql -h {host} -U app -d shop -c ''")
            assert "password authentication failed" in wrong.stderr, host


async def test_postgres_without_a_password_fails_the_start_with_its_message(tmp_path: Path) -> None:
    services = PG.replace("POSTGRES_PASSWORD: s3cret", "POSTGRES_DB_UNUSED: x")
    sandbox = await environment(make_task(tmp_path / "nopw", services))
    with pytest.raises(SandboxStartError) as caught:
        await sandbox.start()
    assert "service 'db'" in str(caught.value)
    assert "POSTGRES_PASSWORD" in str(caught.value)
    assert leftovers(sandbox.env_id) == []


async def test_redis_service_takes_command_line_options(tmp_path: Path) -> None:
    sandbox = await environment(make_task(tmp_path / "redis", CACHE, main="image: redis:7"))
    async with sandbox:
        assert await run(sandbox, "redis-cli -h cache ping") == "PONG"
        assert await run(sandbox, "redis-cli -h cache config get appendonly") == "appendonly\nyes"
        protected = await run(sandbox, "redis-cli -h cache config get protected-mode")
        assert protected == "protected-mode\nno"


async def test_build_s_is_the_wait_for_images_built_side_by_side(tmp_path: Path) -> None:
    """The main image and a sidecar's build at once: their build times overlap, so the
    episode's build_s is the time prepare took, not the sum (which could exceed a run's wall
    time)."""
    services = "  side:\n    build:\n      context: ./side\n"
    root = make_task(tmp_path / "overlap", services, main="build:\n  context: ./app")
    nonce = uuid.uuid4().hex  # a fresh recipe: both images are built, not found
    for name in ("app", "side"):
        (root / "environment" / name).mkdir()
        (root / "environment" / name / "Dockerfile").write_text(
            f"FROM debian:bookworm-slim\nRUN sleep 3 && echo {name}-{nonce} > /built\n"
        )
    started = time.monotonic()
    prepared = await DockerBackend().prepare(sandbox_spec(load_task(root)))
    waited = time.monotonic() - started
    assert not prepared.cached
    assert 3 <= prepared.build_s <= waited


async def test_a_sidecar_built_from_the_task(tmp_path: Path) -> None:
    services = """
  side:
    build:
      context: ./side
      args: {GREETING: hello-from-build}
    healthcheck:
      test: ["CMD", "test", "-f", "/greeting"]
      interval: 1s
"""
    root = make_task(tmp_path / "built", services, main="image: redis:7")
    (root / "environment" / "side").mkdir()
    (root / "environment" / "side" / "Dockerfile").write_text(
        'FROM redis:7\nARG GREETING\nRUN echo "$GREETING" > /greeting\n'
    )
    task = load_task(root)
    prepared = await DockerBackend().prepare(sandbox_spec(task))
    assert any(w.startswith("service side: ") for w in prepared.warnings)  # its FROM redis:7
    sandbox = await environment(root)
    async with sandbox:
        side = docker_client().containers.get(sandbox.sidecar_ids["side"])
        assert side.image is not None
        assert side.image.tags[0].startswith("envfarm-task/test-built-side:")
        assert side.exec_run(["cat", "/greeting"]).output == b"hello-from-build\n"


async def test_sidecars_are_reachable_by_name_and_only_from_their_own_environment(
    tmp_path: Path,
) -> None:
    root = make_task(tmp_path / "pair", CACHE, main="image: redis:7")
    first, second = await environment(root), await environment(root)
    async with first, second:
        assert first.network_id != second.network_id
        await run(first, "redis-cli -h cache set owner first")
        await run(second, "redis-cli -h cache set owner second")
        assert await run(first, "redis-cli -h cache get owner") == "first"
        assert await run(second, "redis-cli -h cache get owner") == "second"
        cache = docker_client().containers.get(first.sidecar_ids["cache"])
        for network in cache.attrs["NetworkSettings"]["Networks"].values():
            address = network["IPAddress"]
            assert address
            probe = await second.exec(f"timeout 5 redis-cli -h {address} ping", timeout=30)
            assert "PONG" not in probe.stdout
            assert probe.exit_code != 0
            neighbour = docker_client().containers.get(second.sidecar_ids["cache"])
            reached = neighbour.exec_run(["timeout", "5", "redis-cli", "-h", address, "ping"])
            assert b"PONG" not in reached.output
        sidecar_sees_main = docker_client().api.exec_create(
            first.sidecar_ids["cache"], ["getent", "hosts", "main"]
        )
        assert docker_client().api.exec_start(sidecar_sees_main["Id"]).strip()


async def test_no_network_main_sees_only_its_sidecars(tmp_path: Path) -> None:
    sandbox = await environment(make_task(tmp_path / "offline", CACHE, main="image: redis:7"))
    async with sandbox:
        routes = (await run(sandbox, "cat /proc/net/route")).splitlines()[1:]
        assert routes, "the environment's own subnet should be routed"
        assert all(line.split()[1] != "00000000" for line in routes), routes
        devices = await run(sandbox, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
        assert sorted(devices.split()) == ["eth0", "lo"]
        # the helper dropped the route itself and then gave up NET_ADMIN (bit 12), as every
        # process it starts lacks it too
        caps = await run(sandbox, "grep -h -e CapPrm -e CapEff /proc/1/status /proc/self/status")
        assert all(not int(line.split()[1], 16) & 1 << 12 for line in caps.splitlines()), caps
        outside = await sandbox.exec("echo > /dev/tcp/192.0.2.1/80", timeout=10)
        assert outside.exit_code != 0
        assert "unreachable" in outside.stderr
        assert await run(sandbox, "redis-cli -h cache ping") == "PONG"
        assert sandbox.network_id is not None
        inspect = docker_client().api.inspect_network(sandbox.network_id)
        assert inspect["Internal"] is True
        subnet = ipaddress.IPv4Network(inspect["IPAM"]["Config"][0]["Subnet"])
        assert subnet.prefixlen == DEFAULT_PREFIX
        assert subnet.subnet_of(ipaddress.IPv4Network(DEFAULT_POOL))


async def test_public_main_also_joins_the_default_bridge(tmp_path: Path) -> None:
    toml = '[agent]\nnetwork_mode = "public"\n'
    sandbox = await environment(
        make_task(tmp_path / "online", CACHE, main="image: redis:7", toml=toml)
    )
    async with sandbox:
        routes = (await run(sandbox, "cat /proc/net/route")).splitlines()[1:]
        assert any(line.split()[1] == "00000000" for line in routes)
        devices = await run(sandbox, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
        assert sorted(devices.split()) == ["eth0", "eth1", "lo"]
        assert await run(sandbox, "redis-cli -h cache ping") == "PONG"
        cache = docker_client().containers.get(sandbox.sidecar_ids["cache"])
        inner = sandbox.config.network_name
        assert set(cache.attrs["NetworkSettings"]["Networks"]) == {inner, f"{inner}-out"}


async def test_a_healthcheck_that_never_passes_fails_the_start_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    services = """
  stuck:
    image: redis:7
    healthcheck:
      test: ["CMD-SHELL", "echo still-warming-up; exit 1"]
      interval: 200ms
      timeout: 1s
      retries: 2
"""
    main = "image: redis:7\ndepends_on:\n  stuck: {condition: service_healthy}"
    sandbox = await environment(make_task(tmp_path / "stuck", services, main=main))
    with pytest.raises(ServiceFailed) as caught:
        await sandbox.start()
    message = str(caught.value)
    assert "service 'stuck'" in message
    assert "still-warming-up" in message
    assert "the same way twice" in message
    assert not caught.value.infrastructure
    assert not caught.value.retryable  # it would fail the same way on the next attempt
    assert leftovers(sandbox.env_id) == []


async def test_a_check_whose_output_still_changes_is_retried(tmp_path: Path) -> None:
    services = """
  slow:
    image: redis:7
    healthcheck:
      test: ["CMD-SHELL", "echo warming $$(cat /proc/uptime); exit 1"]
      interval: 200ms
      timeout: 1s
      retries: 2
"""
    main = "image: redis:7\ndepends_on:\n  slow: {condition: service_healthy}"
    sandbox = await environment(make_task(tmp_path / "slow", services, main=main))
    with pytest.raises(SandboxStartError) as caught:
        await sandbox.start()
    assert not isinstance(caught.value, ServiceFailed)
    assert caught.value.retryable  # a loaded machine may be why; another attempt may pass
    assert leftovers(sandbox.env_id) == []


async def test_a_sidecar_that_exits_fails_the_start_as_the_tasks_fault(tmp_path: Path) -> None:
    services = """
  crashing:
    image: redis:7
    command: ["sh", "-c", "echo cannot-bind-port; exit 3"]
    healthcheck:
      test: ["CMD", "redis-cli", "ping"]
      interval: 1s
      retries: 30
"""
    main = "image: redis:7\ndepends_on:\n  crashing: {condition: service_healthy}"
    sandbox = await environment(make_task(tmp_path / "crashing", services, main=main))
    with pytest.raises(ServiceFailed) as caught:
        await sandbox.start()
    message = str(caught.value)
    assert "service 'crashing' stopped before it was healthy" in message
    assert "code 3" in message
    assert "cannot-bind-port" in message
    assert not caught.value.infrastructure
    assert leftovers(sandbox.env_id) == []


async def test_cancelling_a_start_leaves_nothing(tmp_path: Path) -> None:
    services = """
  waiting:
    image: redis:7
    healthcheck:
      test: ["CMD", "false"]
      interval: 1s
      retries: 600
"""
    run_id = f"test-cancel-{uuid.uuid4().hex[:8]}"
    root = make_task(tmp_path / "cancelled", services, main="image: redis:7")
    sandbox = await environment(root, run_id=run_id)
    starting = asyncio.ensure_future(sandbox.start())
    while not any(item.startswith("container") for item in leftovers(sandbox.env_id)):
        assert not starting.done(), starting.exception()
        await asyncio.sleep(0.1)
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert leftovers(sandbox.env_id) == []
    label: DockerFilters = {"label": [f"{LABEL_RUN}={run_id}"]}  # the main container too
    assert docker_client().containers.list(all=True, filters=label) == []


async def test_the_agent_waits_for_healthchecks(tmp_path: Path) -> None:
    services = """
  slow:
    image: redis:7
    entrypoint: ["sh", "-c", "sleep 2 && touch /tmp/ready && exec sleep infinity"]
    healthcheck:
      test: ["CMD", "test", "-f", "/tmp/ready"]
      interval: 1s
      retries: 20
"""
    toml = (
        "[environment.healthcheck]\n"
        'command = "test -f /tmp/main-ready || { touch /tmp/main-ready; exit 1; }"\n'
        "interval_sec = 1\n"
    )
    sandbox = await environment(
        make_task(tmp_path / "gated", services, main="image: redis:7", toml=toml)
    )
    async with sandbox:
        api = docker_client().api
        slow = api.exec_create(sandbox.sidecar_ids["slow"], ["ls", "/tmp/ready"])
        api.exec_start(slow["Id"])
        assert api.exec_inspect(slow["Id"])["ExitCode"] == 0  # start waited for it
        assert await run(sandbox, "ls /tmp/main-ready") == "/tmp/main-ready"


async def test_main_healthcheck_without_services(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    make_task(root, "")
    (root / "environment" / "docker-compose.yaml").unlink()
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "task.toml").write_text(
        "[environment.healthcheck]\n"
        'command = "test -e /nonexistent"\n'
        "timeout_sec = 1\ninterval_sec = 1\nretries = 1\n"
    )
    sandbox = await environment(root)
    assert sandbox.environment.compose is None
    with pytest.raises(SandboxStartError, match="service 'main'"):
        await sandbox.start()
    label: DockerFilters = {"label": [f"{LABEL_RUN}={sandbox.config.run_id}"]}
    assert docker_client().containers.list(all=True, filters=label) == []


async def test_teardown_removes_containers_network_and_volumes(tmp_path: Path) -> None:
    extra = "volumes:\n  shared:\n"
    services = CACHE.replace(
        "    command:", "    volumes: [shared:/shared, /scratch]\n    command:"
    )
    main = "image: redis:7\nvolumes: [shared:/shared]"
    sandbox = await environment(make_task(tmp_path / "volumes", services, main=main, extra=extra))
    async with sandbox:
        await run(sandbox, "echo hello > /shared/note")
        reading = docker_client().api.exec_create(
            sandbox.sidecar_ids["cache"], ["cat", "/shared/note"]
        )
        assert docker_client().api.exec_start(reading["Id"]) == b"hello\n"
        found = leftovers(sandbox.env_id)
        assert sum(item.startswith("volume") for item in found) == 2  # shared + anonymous
        assert sum(item.startswith("network") for item in found) == 2  # internal + outbound
    assert leftovers(sandbox.env_id) == []


REAPED_SCRIPT = """
import asyncio, sys
from pathlib import Path
from envfarm.plan.planner import plan_episode
from envfarm.spec import load_task
from envfarm.sandbox.docker.backend import DockerBackend

async def main():
    spec = plan_episode(load_task(Path(sys.argv[1]))).sandbox
    backend = DockerBackend()
    sandbox = backend.create(spec, await backend.prepare(spec), run_id="test-reaped")
    await sandbox.start()
    print(sandbox.env_id, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


async def test_reaper_removes_a_dead_owners_sidecars_network_and_volumes(tmp_path: Path) -> None:
    root = make_task(tmp_path / "reaped", CACHE, main="image: redis:7", extra="volumes:\n  data:\n")
    compose = root / "environment" / "docker-compose.yaml"
    compose.write_text(
        compose.read_text().replace("    command:", "    volumes: [data:/data]\n    command:")
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        REAPED_SCRIPT,
        str(root),
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert proc.stderr is not None
        env_id = (await proc.stdout.readline()).decode().strip()
        assert env_id, (await proc.stderr.read()).decode()[-2000:]
        before = leftovers(env_id)
        assert {item.split()[0] for item in before} == {"container", "network", "volume"}
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
        await proc.wait()
    removed = await asyncio.to_thread(reap_orphans)
    assert leftovers(env_id) == []
    assert any(name.startswith(f"envfarm-{env_id}") for name in removed)
