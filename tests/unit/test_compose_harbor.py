"""Compose files as Harbor's compose runs them (pure: no Docker). Fixtures are our own minimal
tasks reproducing what public Harbor tasks write."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from envfarm.errors import TaskSpecError
from envfarm.spec import Task, load_task
from envfarm.spec.compose import is_idle_command


def make_task(root: Path, compose: str | None, *, files: dict[str, str] | None = None) -> Path:
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "task.toml").write_text("[environment]\ncpus = 2\nmemory_mb = 4096\n")
    (root / "instruction.md").write_text("Do it.\n")
    (root / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    if compose is not None:
        (root / "environment" / "docker-compose.yaml").write_text(textwrap.dedent(compose))
    for relative, text in (files or {}).items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


def load(tmp_path: Path, compose: str | None, **kwargs: dict[str, str]) -> Task:
    return load_task(make_task(tmp_path / "t", compose, **kwargs))


def warnings(task: Task) -> dict[str | None, str]:
    return {issue.field: issue.message for issue in task.warnings}


@pytest.mark.parametrize(
    "command",
    [
        ["sh", "-c", "sleep infinity"],
        ["/bin/sh", "-c", "sleep infinity"],
        ["bash", "-c", "tail -f /dev/null"],
        ["sleep", "infinity"],
    ],
)
def test_idle_commands_are_harbors_default(command: list[str]) -> None:
    assert is_idle_command(command)


def test_harbors_idle_command_on_main_is_the_default(tmp_path: Path) -> None:
    task = load(tmp_path, 'services:\n  main:\n    command: ["sh", "-c", "sleep infinity"]\n')
    assert task.main_command is None
    assert task.main_entrypoint is None
    assert task.warnings == ()


def test_a_main_command_that_works_is_recorded_for_the_sandbox(tmp_path: Path) -> None:
    compose = """\
    services:
      main:
        entrypoint: ["/usr/local/bin/start"]
        command: python -m server --port 8000
    """
    task = load(tmp_path, compose, files={"environment/start": "#!/bin/sh\n"})
    assert task.main_command == ["python", "-m", "server", "--port", "8000"]
    assert task.main_entrypoint == ["/usr/local/bin/start"]
    assert is_idle_command(["sh", "-c", "python -m server"]) is False


def test_container_name_and_network_aliases_are_more_dns_names(tmp_path: Path) -> None:
    compose = """\
    services:
      main:
        container_name: app
        networks: {backend: {aliases: [web]}}
      db:
        image: redis:7
        container_name: redis-server
        networks:
          backend:
            aliases: [cache, kv]
            ipv4_address: 172.30.0.5
    networks:
      backend: {}
    """
    task = load(tmp_path, compose)
    assert task.compose is not None
    assert task.compose.main.aliases == ["web", "app"]
    assert task.compose.services["db"].aliases == ["cache", "kv", "redis-server"]
    assert "ipv4_address ignored" in warnings(task)["services.db.networks.backend"]
    assert "networks" not in warnings(task)  # one network: the environment's own


def test_published_ports_are_a_warning(tmp_path: Path) -> None:
    compose = 'services:\n  db:\n    image: redis:7\n    ports: ["6379:6379"]\n'
    task = load(tmp_path, compose)
    assert "not published" in warnings(task)["services.db.ports"]


def test_services_on_different_networks_are_a_warning(tmp_path: Path) -> None:
    compose = """\
    services:
      main:
        networks: [front]
      db:
        image: redis:7
        networks: [back]
    networks:
      front: {}
      back: {}
      outside: {external: true}
    """
    task = load(tmp_path, compose)
    assert "different networks (back, front)" in warnings(task)["networks"]
    assert "never joined" in warnings(task)["networks.outside"]


def test_a_service_on_internal_networks_only_is_marked_as_compose_would_keep_it(
    tmp_path: Path,
) -> None:
    compose = """\
    services:
      db:
        image: redis:7
        networks: [back]
      cache:
        image: redis:7
        networks: [back, front]
      queue:
        image: redis:7
    networks:
      back: {internal: true}
      front:
    """
    task = load(tmp_path, compose)
    assert task.compose is not None
    inside = {name: s.internal_only for name, s in task.compose.sidecars.items()}
    assert inside == {"db": True, "cache": False, "queue": False}
    default = "services:\n  db:\n    image: redis:7\nnetworks:\n  default:\n    internal: true\n"
    compose_of_default = load(tmp_path / "d", default).compose
    assert compose_of_default is not None
    assert compose_of_default.sidecars["db"].internal_only
    with pytest.raises(TaskSpecError, match=r"networks.back.internal: expected true or false"):
        load(tmp_path / "x", "services:\n  db:\n    image: redis:7\nnetworks:\n  back:\n"
             "    internal: 'yes'\n")  # fmt: skip


def test_other_compose_file_names_are_task_content(tmp_path: Path) -> None:
    project = "services:\n  app:\n    image: example/app\n    privileged: true\n"
    task = load(tmp_path, None, files={"environment/docker-compose.yml": project})
    assert task.compose is None
    (issue,) = task.warnings
    assert issue.path.endswith("environment/docker-compose.yml")
    assert "task content" in issue.message
    both = load(tmp_path / "b", "services:\n  db:\n    image: redis:7\n",
                files={"environment/compose.yaml": project})  # fmt: skip
    assert both.compose is not None
    assert set(both.compose.services) == {"main", "db"}


def test_a_compose_file_written_by_harbors_mapper_loads(tmp_path: Path) -> None:
    compose = """\
    services:
      main:
        build:
          context: ${CONTEXT_DIR}/..
          dockerfile: ${CONTEXT_DIR}/Dockerfile
        image: ${MAIN_IMAGE_NAME}
        command: [ "sh", "-c", "sleep infinity" ]
        environment:
          - TEST_DIR=${TEST_DIR}
        volumes:
          - ${HOST_VERIFIER_LOGS_PATH}:${ENV_VERIFIER_LOGS_PATH}
          - ${HOST_AGENT_LOGS_PATH}:${ENV_AGENT_LOGS_PATH}
        deploy:
          resources:
            limits:
              cpus: ${CPUS}
              memory: ${MEMORY}
    """
    task = load(tmp_path, compose, files={"app/main.py": "print(1)\n"})
    assert task.compose is not None
    main = task.compose.main
    assert main.build_context == ".."
    assert main.build_dockerfile == "Dockerfile"
    assert main.environment == {"TEST_DIR": ""}
    assert main.volumes == []
    assert task.main_command is None
    (issue,) = task.warnings
    assert "undefined variable ${TEST_DIR} is empty" in issue.message


def test_limits_in_deploy_other_than_the_tasks_are_a_warning(tmp_path: Path) -> None:
    compose = """\
    services:
      main:
        deploy: {resources: {limits: {cpus: "8"}}}
      db:
        image: redis:7
        deploy: {replicas: 2}
    """
    task = load(tmp_path, compose)
    assert "[environment].cpus and memory_mb" in warnings(task)["services.main.deploy"]
    assert "fixed sidecar limits" in warnings(task)["services.db.deploy"]


def test_a_build_context_outside_the_task_is_still_refused(tmp_path: Path) -> None:
    with pytest.raises(TaskSpecError, match="outside the task's directory"):
        load(tmp_path, "services:\n  main:\n    build: ../..\n")
