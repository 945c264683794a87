"""The compose subset of a task's environment/ (pure: no Docker)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from envfarm.errors import TaskSpecError
from envfarm.spec import load_task
from envfarm.spec.compose import VolumeMount, parse_duration
from envfarm.spec.compose_interpolation import interpolate

FULL = """
version: "3.8"
x-common: &common
  restart: "no"
services:
  main:
    environment:
      - DATABASE_URL=postgresql://app:${DB_PASSWORD:-s3cret}@db:5432/shop
    working_dir: /app
    depends_on:
      db:
        condition: service_healthy
      cache:
        condition: service_started
    volumes:
      - shared:/shared
    x-note: ignored
  db:
    image: postgres:15
    environment:
      POSTGRES_USER: app
      POSTGRES_PASSWORD: ${DB_PASSWORD:-s3cret}
      POSTGRES_DB: shop
      MAX_CONN: 50
      DEBUG: true
    volumes:
      - ./db/init.sql:/docker-entrypoint-initdb.d/init.sql:ro
      - ${CONTEXT_DIR}/db:/seed
      - pgdata:/var/lib/postgresql/data
      - /var/lib/scratch
      - type: volume
        source: shared
        target: /shared
        read_only: true
    healthcheck:
      test: ["CMD-SHELL", "pg_isready -U app -d shop"]
      interval: 1m30s
      timeout: 500ms
      retries: 5
      start_period: 2s
    expose: ["5432"]
  cache:
    <<: *common
    image: redis:7
    command: redis-server --appendonly yes --save "60 1"
    healthcheck:
      test: ["CMD", "redis-cli", "ping"]
    user: "999"
volumes:
  pgdata:
  shared: {}
"""


def make_task(
    root: Path,
    compose: str,
    *,
    toml: str = "",
    name: str = "docker-compose.yaml",
    dockerfile: bool = True,
    files: dict[str, str] | None = None,
) -> Path:
    (root / "environment" / "db").mkdir(parents=True, exist_ok=True)
    (root / "tests").mkdir(exist_ok=True)
    (root / "task.toml").write_text(textwrap.dedent(toml))
    (root / "instruction.md").write_text("Migrate the database.\n")
    (root / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (root / "environment" / "db" / "init.sql").write_text("CREATE TABLE t (x int);\n")
    if dockerfile:
        (root / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\n")
    (root / "environment" / name).write_text(textwrap.dedent(compose))
    for relative, text in (files or {}).items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


def compose_error(tmp_path: Path, compose: str, **kwargs: object) -> TaskSpecError:
    root = make_task(tmp_path / "t", compose, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(TaskSpecError) as caught:
        load_task(root)
    return caught.value


def test_a_full_compose_file_is_read(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path / "t", FULL))
    spec = task.compose
    assert spec is not None
    assert set(spec.services) == {"main", "db", "cache"}
    assert set(spec.sidecars) == {"db", "cache"}
    assert spec.volumes == ["pgdata", "shared"]
    assert task.dockerfile == task.root / "environment" / "Dockerfile"
    db, cache, main = spec.services["db"], spec.services["cache"], spec.main
    assert db.image == "postgres:15"
    assert db.environment == {
        "POSTGRES_USER": "app",
        "POSTGRES_PASSWORD": "s3cret",
        "POSTGRES_DB": "shop",
        "MAX_CONN": "50",
        "DEBUG": "true",
    }
    assert db.volumes == [
        VolumeMount(
            kind="bind",
            source="db/init.sql",
            target="/docker-entrypoint-initdb.d/init.sql",
            read_only=True,
        ),
        VolumeMount(kind="bind", source="db", target="/seed"),
        VolumeMount(kind="volume", source="pgdata", target="/var/lib/postgresql/data"),
        VolumeMount(kind="volume", source=None, target="/var/lib/scratch"),
        VolumeMount(kind="volume", source="shared", target="/shared", read_only=True),
    ]
    assert db.health_argv() == ["/bin/sh", "-c", "pg_isready -U app -d shop"]
    assert db.healthcheck is not None
    assert (db.healthcheck.interval, db.healthcheck.timeout) == (90.0, 0.5)
    assert (db.healthcheck.retries, db.healthcheck.start_period) == (5, 2.0)
    assert cache.command == ["redis-server", "--appendonly", "yes", "--save", "60 1"]
    assert cache.health_argv() == ["redis-cli", "ping"]
    assert cache.user == "999"
    assert main.environment == {"DATABASE_URL": "postgresql://app:s3cret@db:5432/shop"}
    assert main.depends_on == {"db": "service_healthy", "cache": "service_started"}
    assert main.working_dir == "/app"
    order = spec.start_order()
    assert order.index("db") < order.index("main")
    assert order.index("cache") < order.index("main")


def test_main_may_be_left_out_and_comes_from_the_dockerfile(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path / "t", "services:\n  db:\n    image: redis:7\n"))
    assert task.compose is not None
    assert task.compose.main.image is None
    assert task.compose.main.build_context is None
    assert task.dockerfile == task.root / "environment" / "Dockerfile"


def test_main_may_build_from_its_own_context(tmp_path: Path) -> None:
    compose = """
    services:
      main:
        image: ${MAIN_IMAGE_NAME}
        build:
          context: ./app
          dockerfile: main.Dockerfile
          args: [PYTHON=3.11]
      side:
        build:
          context: ./side
          target: tools
    """
    files = {
        "environment/app/main.Dockerfile": "FROM python:3.11-slim\n",
        "environment/side/Dockerfile": "FROM debian:bookworm-slim\n",
    }
    task = load_task(make_task(tmp_path / "t", compose, dockerfile=False, files=files))
    assert task.compose is not None
    main, side = task.compose.main, task.compose.services["side"]
    assert (main.build_context, main.build_dockerfile) == ("app", "app/main.Dockerfile")
    assert main.build_args == {"PYTHON": "3.11"}
    assert main.image is None
    assert task.dockerfile == task.root / "environment" / "app" / "main.Dockerfile"
    assert (side.build_context, side.build_dockerfile) == ("side", "side/Dockerfile")
    assert (main.build_target, side.build_target) == (None, "tools")


def test_a_named_main_image_needs_no_dockerfile(tmp_path: Path) -> None:
    compose = "services:\n  main:\n    image: python:3.11-slim\n  db:\n    image: postgres:15\n"
    task = load_task(make_task(tmp_path / "t", compose, dockerfile=False))
    assert task.compose is not None
    assert task.compose.main.image == "python:3.11-slim"
    assert task.dockerfile is None


def test_env_file_and_task_variables(tmp_path: Path) -> None:
    compose = """
    services:
      db:
        image: postgres:15
        env_file: db.env
        environment:
          POSTGRES_DB: ${DB_NAME}
          PRICE: $$5
    """
    files = {"environment/db.env": "# comment\nPOSTGRES_USER=app\nPOSTGRES_DB=ignored\nQ='x y'\n"}
    toml = '[environment]\nenv = { DB_NAME = "shop" }\n'
    task = load_task(make_task(tmp_path / "t", compose, toml=toml, files=files))
    assert task.compose is not None
    assert task.compose.services["db"].environment == {
        "POSTGRES_USER": "app",
        "POSTGRES_DB": "shop",
        "Q": "x y",
        "PRICE": "$5",
    }


def test_interpolation_rules() -> None:
    variables = {"SET": "v", "EMPTY": ""}
    assert interpolate("a${SET}b$SET", variables) == "avbv"
    assert interpolate("${EMPTY:-d} ${EMPTY-d} ${UNSET-d}", variables) == "d  d"
    assert interpolate("$$SET", variables) == "$SET"
    with pytest.raises(ValueError, match="undefined variable"):
        interpolate("${UNSET}", variables)
    with pytest.raises(ValueError, match="needs it"):
        interpolate("${UNSET:?needs it}", variables)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5s", 5.0), ("1m30s", 90.0), ("500ms", 0.5), ("1h", 3600.0), ("1.5s", 1.5), ("10us", 1e-5)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("value", [5, "5", "5 s", "s", "1x", "", "5s3"])
def test_bad_durations(value: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)


def service(body: str, extra: str = "") -> str:
    """A compose file whose ``db`` service has ``body`` (indented keys)."""
    indented = textwrap.indent(textwrap.dedent(body).strip("\n"), "    ")
    return f"services:\n  db:\n    image: postgres:15\n{indented}\n{extra}"


@pytest.mark.parametrize(
    ("compose", "field", "words"),
    [
        (service("privileged: true"), "services.db.privileged", "unprivileged"),
        (service("cap_add: [NET_ADMIN]"), "services.db.cap_add", "capability"),
        (service("network_mode: host"), "services.db.network_mode", "internal network"),
        (service("devices: [/dev/kvm]"), "services.db.devices", "devices"),
        (service("pid: host"), "services.db.pid", "namespaces"),
        (service("ipc: host"), "services.db.ipc", "namespaces"),
        (service("sysctls: {net.core.somaxconn: 1024}"), "services.db.sysctls", "kernel"),
        (service("shm_size: 1g"), "services.db.shm_size", "supported keys of a service"),
        (service("volumes: [/etc:/host-etc]"), "services.db.volumes[0]", "outside"),
        (service("volumes: [../secrets:/s]"), "services.db.volumes[0]", "outside"),
        (service("volumes: [~/x:/x]"), "services.db.volumes[0]", "home directory"),
        (service("volumes: [./missing.sql:/x]"), "services.db.volumes[0]", "does not exist"),
        (service("volumes: [data:/data]"), "services.db.volumes[0]", "not declared"),
        (service("volumes: [./db:relative]"), "services.db.volumes[0]", "absolute"),
        (service("volumes: [{type: tmpfs, target: /t}]"), "services.db.volumes[0]", "tmpfs"),
        (service("", "volumes:\n  data:\n    driver: local\n"), "volumes.data", "options"),
        (
            service("healthcheck:\n  test: [CMD, true]\n  interval: 5"),
            "services.db.healthcheck.interval",
            "duration",
        ),
        (
            service("healthcheck:\n  test: [CMD, true]\n  tries: 5"),
            "services.db.healthcheck.tries",
            "supported keys here: test",
        ),
        (service("healthcheck:\n  test: [WHAT, x]"), "services.db.healthcheck.test", "CMD-SHELL"),
        (service("depends_on: [nothere]"), "services.db.depends_on.nothere", "no service"),
        (service("depends_on: [db]"), "services.db.depends_on.db", "itself"),
        (
            service("depends_on:\n  main:\n    condition: service_healthy"),
            "services.db.depends_on.main",
            "needs a healthcheck",
        ),
        (
            service("depends_on:\n  main:\n    condition: service_completed_successfully"),
            "services.db.depends_on.main.condition",
            "one-shot",
        ),
        (service("environment: [FROM_HOST]"), "services.db.environment", "host's environment"),
        (
            service("environment: {FROM_HOST: null}"),
            "services.db.environment",
            "host's environment",
        ),
        (service("build: ../../elsewhere"), "services.db.build", "outside"),
        (service("restart: sometimes"), "services.db.restart", "allowed values"),
        ("services:\n  db:\n    environment: {A: b}\n", "services.db", "image: or build:"),
        ("services:\n  main:\n    user: app\n", "services.main.user", "[agent].user"),
        ("services:\n  Bad_Name:\n    image: redis\n", "services.Bad_Name", "lower-case"),
        ("services: {}\n", "services", "one or more services"),
    ],
)
def test_keys_outside_the_subset_are_refused(
    tmp_path: Path, compose: str, field: str | None, words: str
) -> None:
    error = compose_error(tmp_path, compose)
    assert Path(error.path).name == "docker-compose.yaml"
    assert error.field == field
    assert words in error.detail


def test_a_dependency_cycle_is_refused(tmp_path: Path) -> None:
    compose = """
    services:
      a: {image: redis, depends_on: [b]}
      b: {image: redis, depends_on: [c]}
      c: {image: redis, depends_on: [a]}
    """
    error = compose_error(tmp_path, compose)
    assert "dependency cycle: a -> b -> c -> a" in error.detail


def test_invalid_yaml_names_the_position(tmp_path: Path) -> None:
    error = compose_error(tmp_path, "services:\n  db:\n    image: [unclosed\n")
    assert "invalid YAML at line" in error.detail


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    error = compose_error(tmp_path, service("privileged: true\ndevices: [/dev/kvm]\nfoo: 1"))
    assert error.field == "services.db.privileged"
    assert "services.db.devices" in error.detail
    assert "services.db.foo" in error.detail


def test_main_image_twice_is_refused(tmp_path: Path) -> None:
    compose = "services:\n  main:\n    image: python:3.11-slim\n"
    error = compose_error(tmp_path, compose, toml='[environment]\ndocker_image = "debian:12"\n')
    assert error.field == "services.main"
    assert "keep one" in error.detail


def test_main_healthcheck_twice_is_refused(tmp_path: Path) -> None:
    compose = "services:\n  main:\n    healthcheck:\n      test: [CMD, 'true']\n"
    toml = '[environment.healthcheck]\ncommand = "true"\n'
    error = compose_error(tmp_path, compose, toml=toml)
    assert error.field == "services.main.healthcheck"


def test_compose_without_any_main_image_needs_the_dockerfile(tmp_path: Path) -> None:
    error = compose_error(tmp_path, "services:\n  db:\n    image: redis\n", dockerfile=False)
    assert Path(error.path).name == "Dockerfile"
    assert "missing" in error.detail
