"""task.toml as Harbor's parser reads it: what is tolerated (with a warning) and what is refused.

Every fixture is our own minimal task reproducing a habit of public Harbor tasks.
"""

from __future__ import annotations

import textwrap
import tomllib
from pathlib import Path

import pytest

from envfarm.errors import TaskSpecError
from envfarm.spec import load_task
from envfarm.spec.lint import lint_task
from envfarm.spec.task_toml import ParsedConfig, read_task_config


def read(toml: str) -> ParsedConfig:
    return read_task_config(tomllib.loads(textwrap.dedent(toml)), "task.toml")


def fields(parsed: ParsedConfig) -> dict[str | None, str]:
    return {issue.field: issue.message for issue in parsed.warnings}


def make_task(root: Path, toml: str) -> Path:
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "task.toml").write_text(textwrap.dedent(toml))
    (root / "instruction.md").write_text("Do it.\n")
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    return root


def test_unknown_keys_are_taken_out_into_their_own_record() -> None:
    parsed = read(
        """\
        [task]
        name = "acme/cache"
        category = "software-engineering"
        authors = [{ name = "Ada", github = "ada" }]

        [tags]
        topics = ["caching"]

        [metadata]
        difficulty = "hard"
        anything = { goes = true }

        [agent]
        timeout = 600
        timeout_sec = 600

        [solution]
        timeout_sec = 60

        [[verifier.collect]]
        command = "true"
        shell = "bash"
        """
    )
    assert parsed.unknown == {
        "task.category": "software-engineering",
        "task.authors[0].github": "ada",
        "tags": {"topics": ["caching"]},
        "agent.timeout": 600,
        "solution.timeout_sec": 60,
        "verifier.collect[0].shell": "bash",
    }
    assert parsed.config.metadata == {"difficulty": "hard", "anything": {"goes": True}}
    assert parsed.config.agent.timeout_sec == 600
    assert set(fields(parsed)) == set(parsed.unknown)
    assert "ignored (as Harbor does)" in fields(parsed)["task.category"]


def test_a_misspelt_field_names_the_one_it_resembles() -> None:
    parsed = read("[environment]\ncpu = 2\n[agent]\ntimout_sec = 5\n")
    assert parsed.config.environment.cpus == 1
    assert "did you mean 'cpus'?" in fields(parsed)["environment.cpu"]
    assert "did you mean 'timeout_sec'?" in fields(parsed)["agent.timout_sec"]


@pytest.mark.parametrize("version", ["2.0", "1.0.0", "3"])
def test_any_schema_string_is_read_with_a_warning(version: str) -> None:
    parsed = read(f'schema_version = "{version}"\n')
    assert parsed.config.schema_version == version
    assert "not a schema envfarm knows" in fields(parsed)["schema_version"]
    assert read(f'version = "{version}"\n').config.schema_version == version


def test_a_known_schema_and_a_number_read_quietly() -> None:
    assert read('schema_version = "1.3"\n').warnings == []
    assert read("schema_version = 1.2\n").config.schema_version == "1.2"


def test_schema_version_wins_over_a_root_version() -> None:
    parsed = read('version = "2.0"\nschema_version = "1.1"\n')
    assert parsed.config.schema_version == "1.1"
    assert "schema_version = '1.1' wins over version = '2.0'" in fields(parsed)["version"]
    assert read('version = "1.1"\nschema_version = "1.1"\n').warnings == []


def test_a_name_that_cannot_be_an_id_leaves_the_task_its_directory_name(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path / "csv-ingest", '[task]\nname = "CSV Ingestion Task"\n'))
    assert task.id == "csv-ingest"
    assert task.unknown == {"task.name": "CSV Ingestion Task"}
    assert "known by its directory name" in task.warnings[0].message


def test_a_runtime_table_of_another_tool_is_ignored() -> None:
    parsed = read('[environment.runtime]\npython = "3.12"\n')
    assert parsed.config.environment.runtime is None
    assert parsed.unknown == {"environment.runtime": {"python": "3.12"}}
    with pytest.raises(TaskSpecError, match="gvisor"):
        read('[environment]\nruntime = "kata"\n')


@pytest.mark.parametrize(
    ("toml", "field"),
    [
        ('[[steps]]\nname = "a/b"\n', "steps[0].name"),
        ("[environment]\ngpus = 1\n", "environment.gpus"),
        ('[agent]\nnetwork_mode = "allowlist"\n', "agent.network_mode"),
        ("[environment]\ncpus = 0\n", "environment.cpus"),
        ('[environment]\ncpus = "two"\n', "environment.cpus"),
    ],
)
def test_what_would_change_the_task_is_still_refused(toml: str, field: str) -> None:
    with pytest.raises(TaskSpecError) as caught:
        read(toml)
    assert caught.value.field == field


def test_tolerated_keys_are_lint_warnings_of_the_loaded_task(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path / "t", '[task]\ncategory = "x"\n[tags]\na = 1\n'))
    assert task.unknown == {"task.category": "x", "tags": {"a": 1}}
    tolerated = [f for f in lint_task(task) if f.rule == "tolerated"]
    assert [f.severity for f in tolerated] == ["warning", "warning"]
    assert "task.category: unknown field" in tolerated[0].message
