"""Legacy Terminal-Bench tasks (task.yaml) read into the Task model, and every refusal."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envfarm.errors import TaskSpecError
from envfarm.spec import discover_tasks, load_task
from envfarm.spec.legacy import TEST_WRAPPER, load_legacy_task
from envfarm.spec.task import content_hash

TASK_YAML = """\
instruction: |-
  Create /app/hello.txt containing "Hello, world!".
author_name: Jane Doe
author_email: jane@example.com
difficulty: easy
category: file-operations
tags: [files, beginner]
parser_name: pytest
max_agent_timeout_sec: 120
max_test_timeout_sec: 30.5
run_tests_in_same_shell: false
expert_time_estimate_min: 2
"""

COMPOSE = """\
services:
  client:
    build:
      dockerfile: Dockerfile
    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}
    container_name: ${T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}
    command: [ "sh", "-c", "sleep infinity" ]
    environment:
      - TEST_DIR=${T_BENCH_TEST_DIR}
    volumes:
      - ${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}
      - ${T_BENCH_TASK_AGENT_LOGS_PATH}:${T_BENCH_CONTAINER_AGENT_LOGS_PATH}
"""


def make_legacy(root: Path, *, files: dict[str, str | None] | None = None) -> Path:
    """A Terminal-Bench task; a None value in ``files`` leaves that file out."""
    contents: dict[str, str | None] = {
        "task.yaml": TASK_YAML,
        "docker-compose.yaml": COMPOSE,
        "Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
        "run-tests.sh": '#!/bin/bash\ntest "$(cat /app/hello.txt)" = "Hello, world!"\n',
        "solution.sh": '#!/bin/bash\necho "Hello, world!" > /app/hello.txt\n',
        "tests/test_outputs.py": "def test_x():\n    pass\n",
        **(files or {}),
    }
    for relative, text in contents.items():
        if text is not None:
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_text(text)
    if (root / "run-tests.sh").exists():
        (root / "run-tests.sh").chmod(0o755)
    return root


def refusal(root: Path, stage: Path) -> TaskSpecError:
    with pytest.raises(TaskSpecError) as caught:
        load_legacy_task(root, stage_root=stage)
    assert "legacy Terminal-Bench task" in caught.value.detail
    return caught.value


def test_a_legacy_task_maps_to_the_task_model(tmp_path: Path) -> None:
    root = make_legacy(tmp_path / "hello-world")
    before = content_hash(root)
    task = load_legacy_task(root, stage_root=tmp_path / "stage")
    assert task.id == "hello-world"
    assert task.instruction == 'Create /app/hello.txt containing "Hello, world!".'
    assert task.dockerfile == root.resolve() / "Dockerfile"
    assert task.environment_dir == root.resolve()
    config = task.config
    assert config.agent.timeout_sec == 120
    assert config.verifier.timeout_sec == 30.5
    assert config.verifier.environment_mode == "shared"
    assert [(a.name, a.email) for a in config.task.authors] == [("Jane Doe", "jane@example.com")]
    assert config.task.keywords == ["files", "beginner"]
    assert config.metadata["difficulty"] == "easy"
    assert config.metadata["category"] == "file-operations"
    assert config.metadata["terminal_bench"] == {
        "parser_name": "pytest",
        "expert_time_estimate_min": 2,
    }
    assert config.environment.env == {"TEST_DIR": "/tests"}
    assert config.agent_network()
    assert config.verifier_network()
    assert task.content_hash == before
    assert content_hash(root) == before, "the task directory must not be written to"


def test_tests_and_solution_are_staged_outside_the_task(tmp_path: Path) -> None:
    root = make_legacy(tmp_path / "hello-world")
    stage = tmp_path / "stage"
    task = load_legacy_task(root, stage_root=stage)
    assert task.tests_dir.is_relative_to(stage)
    assert sorted(p.name for p in task.tests_dir.iterdir()) == [
        "run-tests.sh",
        "test.sh",
        "test_outputs.py",
    ]
    assert (task.tests_dir / "test.sh").read_text() == TEST_WRAPPER
    assert (task.tests_dir / "run-tests.sh").read_text() == (root / "run-tests.sh").read_text()
    assert os.access(task.tests_dir / "run-tests.sh", os.X_OK)
    assert task.solution_dir is not None
    assert (task.solution_dir / "solve.sh").read_text() == (root / "solution.sh").read_text()
    assert not (root / "solution").exists()
    assert not (root / "tests" / "test.sh").exists()
    again = load_legacy_task(root, stage_root=stage)
    assert again.tests_dir == task.tests_dir
    (root / "run-tests.sh").write_text("#!/bin/bash\nexit 1\n")
    changed = load_legacy_task(root, stage_root=stage)
    assert changed.tests_dir != task.tests_dir
    assert (changed.tests_dir / "run-tests.sh").read_text() == "#!/bin/bash\nexit 1\n"


def test_the_wrapper_turns_the_exit_code_into_the_reward() -> None:
    assert "bash /tests/run-tests.sh" in TEST_WRAPPER
    assert '"reward": %s' in TEST_WRAPPER
    assert 'if [ "$status" -eq 0 ]; then reward=1; fi' in TEST_WRAPPER


def test_load_task_and_discovery_read_legacy_tasks(tmp_path: Path) -> None:
    make_legacy(tmp_path / "tasks" / "hello-world")
    (tmp_path / "tasks" / "broken").mkdir()
    (tmp_path / "tasks" / "broken" / "task.yaml").write_text("instruction: do it\n")
    assert load_task(tmp_path / "tasks" / "hello-world").id == "hello-world"
    assert load_task(tmp_path / "tasks" / "hello-world" / "task.yaml").id == "hello-world"
    tasks, errors = discover_tasks([tmp_path / "tasks"])
    assert [t.id for t in tasks] == ["hello-world"]
    assert len(errors) == 1
    assert "legacy Terminal-Bench task" in errors[0].detail
    assert "run-tests.sh" in errors[0].detail


def test_a_plain_dockerfile_without_compose_is_enough(tmp_path: Path) -> None:
    root = make_legacy(tmp_path / "t", files={"docker-compose.yaml": None})
    task = load_legacy_task(root, stage_root=tmp_path / "stage")
    assert task.dockerfile == root.resolve() / "Dockerfile"
    assert task.config.environment.env == {}


def test_network_none_working_dir_and_a_custom_dockerfile(tmp_path: Path) -> None:
    compose = (
        "services:\n  client:\n    build:\n      context: ./env\n      dockerfile: Custom\n"
        "    network_mode: none\n    working_dir: /work\n"
        "    environment:\n      MODE: ${MODE:-fast}\n"
    )
    root = make_legacy(
        tmp_path / "t",
        files={"docker-compose.yaml": compose, "env/Custom": "FROM debian:bookworm-slim\n"},
    )
    task = load_legacy_task(root, stage_root=tmp_path / "stage")
    assert task.dockerfile == root.resolve() / "env" / "Custom"
    assert task.environment_dir == root.resolve() / "env"
    assert not task.config.agent_network()
    assert task.config.environment.workdir == "/work"
    assert task.config.environment.env == {"MODE": "fast"}


def test_older_descriptions_form_gives_the_instruction(tmp_path: Path) -> None:
    yaml = "descriptions:\n  - key: base\n    description: Do the thing.\n"
    root = make_legacy(tmp_path / "t", files={"task.yaml": yaml})
    assert load_legacy_task(root, stage_root=tmp_path / "s").instruction == "Do the thing."


def test_solution_yaml_is_not_supported(tmp_path: Path) -> None:
    root = make_legacy(
        tmp_path / "t", files={"solution.sh": None, "solution.yaml": "- command: ls\n"}
    )
    error = refusal(root, tmp_path / "stage")
    assert error.path == str(root / "solution.yaml")
    assert "not supported by envfarm yet" in error.detail
    assert "solution.sh" in error.detail


@pytest.mark.parametrize(
    ("yaml", "field", "words"),
    [
        ("instruction: x\nbogus: 1\n", "bogus", "unknown field"),
        ("instruction: x\ndifficulty: extreme\n", "difficulty", "'extreme'"),
        ("instruction: x\nmax_agent_timeout_sec: -5\n", "max_agent_timeout_sec", "greater than 0"),
        ("instruction: x\nrun_tests_in_same_shell: true\n", "run_tests_in_same_shell", "shell"),
        ("instruction: '  '\n", "instruction", "empty"),
        ("author_name: x\n", "instruction", "missing"),
    ],
)
def test_bad_task_yaml_fields(tmp_path: Path, yaml: str, field: str, words: str) -> None:
    root = make_legacy(tmp_path / "t", files={"task.yaml": yaml})
    error = refusal(root, tmp_path / "stage")
    assert error.path == str(root / "task.yaml")
    assert error.field == field
    assert words in error.detail


def test_invalid_yaml_names_the_position(tmp_path: Path) -> None:
    root = make_legacy(tmp_path / "t", files={"task.yaml": "instruction: [unclosed\n"})
    assert "invalid YAML at line" in refusal(root, tmp_path / "stage").detail


@pytest.mark.parametrize(
    ("compose", "words"),
    [
        (COMPOSE + "  db:\n    image: postgres:16\n", "service containers besides the client (db)"),
        (
            COMPOSE.replace("- ${T_BENCH_TASK_LOGS_PATH}", "- /srv/data"),
            "mounts are not supported",
        ),
        (COMPOSE + "    privileged: true\n", "services.client.privileged"),
        (COMPOSE.replace("TEST_DIR=${T_BENCH_TEST_DIR}", "X=${HOST_SECRET}"), "HOST_SECRET"),
        (COMPOSE + "    network_mode: host\n", "network_mode"),
        ("services:\n  client:\n    build:\n      context: ../elsewhere\n", "inside the task"),
    ],
)
def test_compose_features_beyond_the_client_are_refused(
    tmp_path: Path, compose: str, words: str
) -> None:
    root = make_legacy(tmp_path / "t", files={"docker-compose.yaml": compose})
    error = refusal(root, tmp_path / "stage")
    assert words in str(error)


def test_missing_files_are_all_reported_at_once(tmp_path: Path) -> None:
    root = make_legacy(
        tmp_path / "t",
        files={"run-tests.sh": None, "docker-compose.yaml": None, "Dockerfile": None},
    )
    error = refusal(root, tmp_path / "stage")
    assert "run-tests.sh" in str(error)
    assert "Dockerfile" in str(error)


def test_a_test_sh_in_tests_would_clash_with_the_wrapper(tmp_path: Path) -> None:
    root = make_legacy(tmp_path / "t", files={"tests/test.sh": "true\n"})
    assert "clashes" in refusal(root, tmp_path / "stage").detail
