"""Loading Harbor task directories: valid tasks, every refusal, discovery and hashing."""

from __future__ import annotations

import os
import re
import textwrap
import tomllib
from pathlib import Path

import pytest

from envfarm.errors import TaskSpecError
from envfarm.spec import TaskConfig, discover_tasks, load_task, parse_task_config

NOT_YET = "not supported by envfarm yet"

FULL_EXAMPLE = """\
schema_version = "1.4"
source = "https://example.org/acme/tasks"

[task]
name = "acme/fix-cache-eviction"
version = "1.0.0"
description = "Fix LRU eviction bug in the service cache"
authors = [{ name = "Jane Doe", email = "jane@acme.dev" }]
keywords = ["python", "caching"]

[metadata]
difficulty = "medium"
category = "software_engineering"

[agent]
timeout_sec = 900.0
user = "agent"
network_mode = "no-network"

[verifier]
timeout_sec = 600.0
env = { JUDGE_MODEL = "${JUDGE_MODEL:-small}", TOKEN = "${TOKEN}" }
network_mode = "no-network"

[environment]
build_timeout_sec = 600.0
cpus = 2
memory_mb = 4096
storage_mb = 10240
workdir = "/app"
env = { PYTHONUNBUFFERED = "1" }

[environment.healthcheck]
command = "test -f /app/ready"
retries = 5

[solution]
env = { FAST = "1" }
"""


def make_task(
    root: Path,
    toml: str = "",
    *,
    instruction: str | None = "Fix the bug.\n",
    dockerfile: bool = True,
    test_sh: bool = True,
    solve_sh: bool = False,
    extra: dict[str, str] | None = None,
) -> Path:
    """Write a task directory; each piece can be left out to test its absence."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "task.toml").write_text(textwrap.dedent(toml))
    if instruction is not None:
        (root / "instruction.md").write_text(instruction)
    (root / "environment").mkdir(exist_ok=True)
    if dockerfile:
        (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    if test_sh:
        (root / "tests").mkdir(exist_ok=True)
        (root / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    if solve_sh:
        (root / "solution").mkdir(exist_ok=True)
        (root / "solution" / "solve.sh").write_text("true\n")
    for relative, text in (extra or {}).items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


def spec_error(root: Path) -> TaskSpecError:
    with pytest.raises(TaskSpecError) as caught:
        load_task(root)
    return caught.value


def config_error(toml: str) -> TaskSpecError:
    with pytest.raises(TaskSpecError) as caught:
        parse_task_config(tomllib.loads(textwrap.dedent(toml)), "task.toml")
    return caught.value


def parse(toml: str) -> TaskConfig:
    return parse_task_config(tomllib.loads(textwrap.dedent(toml)), "task.toml")


# --- valid tasks ---------------------------------------------------------------------------


def test_minimal_task_gets_the_documented_defaults(tmp_path: Path) -> None:
    root = make_task(tmp_path / "hello")
    task = load_task(root)
    assert task.id == "hello"
    assert task.root == root.resolve()
    assert task.instruction == "Fix the bug.\n"
    assert task.environment_dir == root.resolve() / "environment"
    assert task.dockerfile == root.resolve() / "environment" / "Dockerfile"
    assert task.tests_dir == root.resolve() / "tests"
    assert task.solution_dir is None
    assert len(task.content_hash) == 64
    config = task.config
    assert config.schema_version == "1.4"
    assert config.agent.timeout_sec is None
    assert config.verifier.timeout_sec == 600
    assert config.verifier.environment_mode == "clean"
    assert (config.environment.cpus, config.environment.memory_mb) == (1, 2048)
    assert (config.environment.storage_mb, config.environment.gpus) == (10240, 0)
    assert config.environment.healthcheck is None


def test_full_harbor_example_loads_every_field(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path / "dir-name", FULL_EXAMPLE, solve_sh=True))
    config = task.config
    assert task.id == "acme/fix-cache-eviction"
    assert task.solution_dir == task.root / "solution"
    assert config.source == "https://example.org/acme/tasks"
    assert config.task.authors[0].email == "jane@acme.dev"
    assert config.task.keywords == ["python", "caching"]
    assert config.metadata == {"difficulty": "medium", "category": "software_engineering"}
    assert (config.agent.timeout_sec, config.agent.user) == (900.0, "agent")
    assert config.verifier.env == {"JUDGE_MODEL": "${JUDGE_MODEL:-small}", "TOKEN": "${TOKEN}"}
    assert (config.environment.cpus, config.environment.memory_mb) == (2, 4096)
    assert config.environment.workdir == "/app"
    assert config.solution.env == {"FAST": "1"}
    healthcheck = config.environment.healthcheck
    assert healthcheck is not None
    assert (healthcheck.command, healthcheck.retries) == ("test -f /app/ready", 5)
    assert (healthcheck.interval_sec, healthcheck.timeout_sec) == (5, 30)
    assert (healthcheck.start_period_sec, healthcheck.start_interval_sec) == (0, 5)
    assert config.agent_network() is False
    assert config.verifier_network() is False


def test_id_is_the_task_name_when_set_else_the_directory_name(tmp_path: Path) -> None:
    named = make_task(tmp_path / "a", '[task]\nname = "org/solver"\n')
    unnamed = make_task(tmp_path / "b", '[task]\ndescription = "no name"\n')
    assert load_task(named).id == "org/solver"
    assert load_task(unnamed).id == "b"


def test_task_toml_path_loads_its_directory(tmp_path: Path) -> None:
    root = make_task(tmp_path / "t")
    assert load_task(root / "task.toml").root == root.resolve()


def test_prebuilt_image_makes_the_dockerfile_optional(tmp_path: Path) -> None:
    toml = '[environment]\ndocker_image = "acme/app:1"\n'
    task = load_task(make_task(tmp_path / "t", toml, dockerfile=False))
    assert task.dockerfile is None
    assert task.config.environment.docker_image == "acme/app:1"


def test_the_agent_has_no_network_unless_the_task_asks() -> None:
    assert parse("").agent_network() is False
    public_env = parse('[environment]\nnetwork_mode = "public"\n')
    assert public_env.agent_network() is True
    assert public_env.verifier_network() is True
    verifier_only = parse(
        '[verifier]\nnetwork_mode = "no-network"\n[agent]\nnetwork_mode = "public"\n'
    )
    assert verifier_only.agent_network() is True
    assert verifier_only.verifier_network() is False
    assert verifier_only.verifier_network_set() is False


def test_an_unset_verifier_network_is_harbors_public_only_in_a_fresh_container(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unset = parse("")
    assert unset.verifier_network_set() is None
    assert unset.verifier_network() is True  # clean, the default mode
    assert unset.verifier_network_implied() is True
    assert parse('[verifier]\nenvironment_mode = "separate"\n').verifier_network() is True
    shared = parse('[verifier]\nenvironment_mode = "shared"\n')
    assert (shared.verifier_network(), shared.verifier_network_implied()) == (False, False)
    assert unset.verifier_network("none") is False
    monkeypatch.setenv("ENVFARM_VERIFIER_NETWORK", "none")
    assert (unset.verifier_network(), unset.verifier_network_implied()) == (False, False)
    assert parse('[verifier]\nnetwork_mode = "public"\n').verifier_network() is True
    assert parse("[environment]\nallow_internet = true\n").verifier_network() is True
    monkeypatch.setenv("ENVFARM_VERIFIER_NETWORK", "sometimes")
    with pytest.raises(TaskSpecError, match="ENVFARM_VERIFIER_NETWORK: expected one of"):
        unset.verifier_network()


def test_each_phase_resolves_its_own_network_mode() -> None:
    config = parse('[agent]\nnetwork_mode = "no-network"\n[environment]\nnetwork_mode = "public"\n')
    assert (config.agent_network(), config.verifier_network()) == (False, True)
    config = parse('[agent]\nnetwork_mode = "public"\n[verifier]\nenvironment_mode = "shared"\n')
    assert (config.agent_network(), config.verifier_network()) == (True, False)
    config = parse('[agent]\nnetwork_mode = "public"\n')
    assert (config.agent_network(), config.verifier_network()) == (True, True)


def test_runtime_gvisor_is_the_only_runtime_a_task_names() -> None:
    assert parse('[environment]\nruntime = "gvisor"\n').environment.runtime == "gvisor"
    error = config_error('[environment]\nruntime = "runc"\n')
    assert error.field == "environment.runtime"


def test_uid_user_is_stored_as_text() -> None:
    config = parse("[agent]\nuser = 1000\n[verifier]\nuser = 0\n")
    assert (config.agent.user, config.verifier.user) == ("1000", "0")


# --- deprecated Harbor fields ----------------------------------------------------------------


def test_deprecated_fields_are_translated() -> None:
    config = parse(
        """\
        version = "1.0"
        [environment]
        memory = "4G"
        storage = "512M"
        allow_internet = false
        """
    )
    assert config.schema_version == "1.0"
    assert (config.environment.memory_mb, config.environment.storage_mb) == (4096, 512)
    assert config.environment.network_mode == "no-network"
    assert parse("[environment]\nallow_internet = true\n").agent_network() is True


def test_deprecated_fields_that_contradict_new_ones_are_errors() -> None:
    error = config_error('[environment]\nmemory = "2G"\nmemory_mb = 4096\n')
    assert error.field == "environment.memory"
    assert "keep only memory_mb" in error.detail
    error = config_error('[environment]\nallow_internet = true\nnetwork_mode = "no-network"\n')
    assert error.field == "environment.allow_internet"


def test_unparseable_deprecated_size_is_an_error() -> None:
    error = config_error('[environment]\nstorage = "lots"\n')
    assert error.field == "environment.storage"
    assert "'2G'" in error.detail
    assert "'lots'" in error.detail


def test_translated_value_out_of_range_names_its_origin() -> None:
    error = config_error('[environment]\nmemory = "1M"\n')
    assert error.field == "environment.memory_mb"
    assert "environment.memory = '1M'" in error.detail


# --- unsupported Harbor features -----------------------------------------------------------


@pytest.mark.parametrize(
    ("toml", "field"),
    [
        (
            '[[steps]]\nname = "a"\n[steps.verifier.environment]\ncpus = 2\n',
            "steps[0].verifier.environment",
        ),
        (
            '[[verifier.collect]]\ncommand = "pg_dump"\nservice = "db"\n',
            "verifier.collect[0].service",
        ),
        ('[agent]\nnetwork_mode = "allowlist"\n', "agent.network_mode"),
        ('[verifier]\nnetwork_mode = "allowlist"\n', "verifier.network_mode"),
        ('[environment]\nnetwork_mode = "allowlist"\n', "environment.network_mode"),
        ('[agent]\nallowed_hosts = ["pypi.org"]\n', "agent.allowed_hosts"),
        ('[environment]\nos = "windows"\n', "environment.os"),
        ("[environment]\ngpus = 1\n", "environment.gpus"),
        ('[environment]\ngpu_types = ["H100"]\n', "environment.gpu_types"),
        ('[environment.tpu]\ntype = "v5e"\n', "environment.tpu"),
    ],
)
def test_unsupported_fields_are_refused(toml: str, field: str) -> None:
    error = config_error(toml)
    assert error.field == field
    assert NOT_YET in error.detail


def test_a_verifier_image_of_its_own_implies_separate_mode_and_gives_its_network() -> None:
    config = parse('[verifier.environment]\nallow_internet = false\ndocker_image = "x:1"\n')
    assert config.verifier.environment_mode == "separate"
    assert config.verifier.network_mode == "no-network"
    assert config.verifier.environment is not None
    assert config.verifier.environment.docker_image == "x:1"


def test_a_verifier_image_of_its_own_contradicts_another_mode() -> None:
    error = config_error(
        '[verifier]\nenvironment_mode = "shared"\n[verifier.environment]\ncpus = 2\n'
    )
    assert error.field == "verifier.environment"
    assert "separate" in error.detail


@pytest.mark.parametrize("mode", ["clean", "shared", "separate"])
def test_verifier_environment_modes(mode: str) -> None:
    config = parse(f'[verifier]\nenvironment_mode = "{mode}"\n')
    assert config.verifier.environment_mode == mode


def test_an_unknown_verifier_environment_mode_is_refused() -> None:
    error = config_error('[verifier]\nenvironment_mode = "sandbox"\n')
    assert error.field == "verifier.environment_mode"
    assert "'clean'" in error.detail


def test_empty_unsupported_values_are_harmless() -> None:
    config = parse("artifacts = []\n[environment]\nmcp_servers = []\ngpu_types = []\n")
    assert config.environment.gpus == 0


@pytest.mark.parametrize(
    ("extra", "drop_test_sh", "bad_file"),
    [
        ({"tests/test.bat": "exit 0\n"}, True, "test.bat"),
        ({"solution/solve.bat": "exit 0\n"}, False, "solve.bat"),
        ({"trajectory.json": "{}\n"}, False, "trajectory.json"),
    ],
)
def test_unsupported_files_are_refused(
    tmp_path: Path, extra: dict[str, str], drop_test_sh: bool, bad_file: str
) -> None:
    error = spec_error(make_task(tmp_path / "t", test_sh=not drop_test_sh, extra=extra))
    assert Path(error.path).name == bad_file
    assert NOT_YET in error.detail


# --- invalid fields ------------------------------------------------------------------------


def test_wrong_type_names_expected_type_and_given_value() -> None:
    error = config_error('[environment]\ncpus = "2"\n')
    assert error.field == "environment.cpus"
    assert "expected a number, got string '2'" in error.detail
    flag = config_error("[environment]\nmemory_mb = true\n")
    assert "expected an integer, got boolean True" in flag.detail


def test_bad_literal_lists_the_allowed_values() -> None:
    error = config_error('[agent]\nnetwork_mode = "private"\n')
    assert error.field == "agent.network_mode"
    assert "'no-network'" in error.detail
    assert "'public'" in error.detail
    assert "'private'" in error.detail


@pytest.mark.parametrize(
    ("toml", "field", "hint"),
    [
        ("[environment]\ncpus = 0\n", "environment.cpus", "greater than 0"),
        ("[environment]\nmemory_mb = 32\n", "environment.memory_mb", "at least 64"),
        ("[agent]\ntimeout_sec = 0\n", "agent.timeout_sec", "greater than 0"),
        ("[verifier]\ntimeout_sec = -1\n", "verifier.timeout_sec", "greater than 0"),
        ("[environment]\nbuild_timeout_sec = 0\n", "environment.build_timeout_sec", "greater"),
        ('[environment]\nworkdir = "app"\n', "environment.workdir", "absolute"),
        ('[verifier.env]\n"MY-VAR" = "1"\n', "verifier.env", "'MY-VAR'"),
        ('[environment.env]\n2X = "1"\n', "environment.env", "'2X'"),
        ('[task]\nauthors = [{ email = "x@y.z" }]\n', "task.authors[0].name", "missing"),
        ('[environment.healthcheck]\ncommand = ""\n', "environment.healthcheck.command", "empty"),
    ],
)
def test_values_out_of_range_are_errors(toml: str, field: str, hint: str) -> None:
    error = config_error(toml)
    assert error.field == field
    assert hint in error.detail


def test_every_problem_of_a_file_is_reported_at_once() -> None:
    error = config_error('[agent]\ntimeout_sec = 0\nuser = ""\n[environment]\ncpus = "x"\n')
    assert error.field == "agent.timeout_sec"
    assert "agent.user" in error.detail
    assert "environment.cpus" in error.detail


def test_toml_syntax_error_names_line_and_column(tmp_path: Path) -> None:
    error = spec_error(make_task(tmp_path / "t", "[agent]\ntimeout_sec = 1\ncpus = = 2\n"))
    assert error.path == str(tmp_path / "t" / "task.toml")
    assert "line 3, column" in error.detail


# --- task directory layout -----------------------------------------------------------------


def test_missing_instruction_is_an_error(tmp_path: Path) -> None:
    error = spec_error(make_task(tmp_path / "t", instruction=None))
    assert error.path == str(tmp_path / "t" / "instruction.md")
    assert "missing" in error.detail


def test_empty_instruction_is_an_error(tmp_path: Path) -> None:
    error = spec_error(make_task(tmp_path / "t", instruction="  \n"))
    assert "empty" in error.detail


def test_missing_test_script_is_an_error(tmp_path: Path) -> None:
    error = spec_error(make_task(tmp_path / "t", test_sh=False))
    assert error.path == str(tmp_path / "t" / "tests" / "test.sh")
    assert "reward.json" in error.detail


def test_missing_dockerfile_without_image_is_an_error(tmp_path: Path) -> None:
    error = spec_error(make_task(tmp_path / "t", dockerfile=False))
    assert error.path == str(tmp_path / "t" / "environment" / "Dockerfile")
    assert "docker_image" in error.detail


def test_config_and_layout_problems_come_in_one_error(tmp_path: Path) -> None:
    error = spec_error(make_task(tmp_path / "t", "[agent]\ntimeout_sec = 0\n", test_sh=False))
    assert error.field == "agent.timeout_sec"
    assert "tests/test.sh" in error.detail


def test_legacy_terminal_bench_task_is_named_as_such(tmp_path: Path) -> None:
    root = tmp_path / "old"
    root.mkdir()
    (root / "task.yaml").write_text("instruction: do it\n")
    assert "legacy Terminal-Bench" in spec_error(root).detail
    tasks, errors = discover_tasks([tmp_path])
    assert tasks == []
    assert "legacy Terminal-Bench" in errors[0].detail


def test_directory_without_task_toml_is_an_error(tmp_path: Path) -> None:
    assert "task.toml" in spec_error(tmp_path).detail
    assert "does not exist" in spec_error(tmp_path / "nope").detail


# --- discovery -----------------------------------------------------------------------------


def test_discovery_keeps_good_tasks_next_to_a_bad_one(tmp_path: Path) -> None:
    make_task(tmp_path / "suite" / "alpha")
    make_task(tmp_path / "suite" / "group" / "beta")
    make_task(tmp_path / "suite" / "broken", "[environment]\ncpus = -1\n")
    tasks, errors = discover_tasks([tmp_path / "suite"])
    assert [task.id for task in tasks] == ["alpha", "beta"]
    assert len(errors) == 1
    assert errors[0].field == "environment.cpus"


def test_discovery_does_not_look_inside_a_task(tmp_path: Path) -> None:
    make_task(tmp_path / "outer", extra={"tests/fixture/task.toml": "not = [valid"})
    tasks, errors = discover_tasks([tmp_path])
    assert [task.id for task in tasks] == ["outer"]
    assert errors == []


def test_duplicate_ids_are_an_error_for_the_later_task(tmp_path: Path) -> None:
    make_task(tmp_path / "a", '[task]\nname = "org/same"\n')
    make_task(tmp_path / "b", '[task]\nname = "org/same"\n')
    tasks, errors = discover_tasks([tmp_path])
    assert [task.root.name for task in tasks] == ["a"]
    assert len(errors) == 1
    assert errors[0].path == str(tmp_path / "b" / "task.toml")
    assert "duplicate task id 'org/same'" in errors[0].detail


def test_same_task_named_twice_loads_once(tmp_path: Path) -> None:
    make_task(tmp_path / "a")
    tasks, errors = discover_tasks([tmp_path, tmp_path / "a"])
    assert [task.id for task in tasks] == ["a"]
    assert errors == []


def test_missing_and_empty_paths_are_errors(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    make_task(tmp_path / "good")
    tasks, errors = discover_tasks([tmp_path / "missing", tmp_path / "empty", tmp_path / "good"])
    assert [task.id for task in tasks] == ["good"]
    assert [Path(e.path).name for e in errors] == ["missing", "empty"]
    assert "does not exist" in errors[0].detail
    assert "no task found" in errors[1].detail


# --- content hash --------------------------------------------------------------------------


def test_content_hash_is_stable_and_tracks_every_change(tmp_path: Path) -> None:
    root = make_task(tmp_path / "t", solve_sh=True)
    first = load_task(root).content_hash
    assert load_task(root).content_hash == first
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (root / "tests" / "helper.pyc").write_bytes(b"\1")
    assert load_task(root).content_hash == first
    (root / "tests" / "test.sh").write_text("echo 0 > /logs/verifier/reward.txt\n")
    changed = load_task(root).content_hash
    assert changed != first
    os.chmod(root / "solution" / "solve.sh", 0o755)
    executable = load_task(root).content_hash
    assert executable != changed
    (root / "solution" / "solve.sh").rename(root / "solution" / "solve2.sh")
    (root / "solution" / "solve2.sh").rename(root / "solution" / "solve.sh")
    assert load_task(root).content_hash == executable
    (root / "environment" / "data.txt").write_text("")
    assert load_task(root).content_hash != executable


def test_content_hash_does_not_depend_on_the_location(tmp_path: Path) -> None:
    one = load_task(make_task(tmp_path / "x" / "t")).content_hash
    two = load_task(make_task(tmp_path / "y" / "t")).content_hash
    assert one == two


def test_the_documented_example_task_loads(tmp_path: Path) -> None:
    doc = (Path(__file__).parents[2] / "docs" / "task-format.md").read_text()
    example = doc[doc.index("## A complete example") : doc.index("## Using the loader")]
    files = re.findall(r"`([^`\n]+)`:\n\n```\w*\n(.*?)```", example, re.DOTALL)
    assert [name for name, _ in files][:2] == ["task.toml", "instruction.md"]
    extra = {name: body for name, body in files if name != "task.toml"}
    extra |= {"environment/wc.py": "print(0)\n", "tests/test_wc.py": ""}
    toml = dict(files)["task.toml"]
    task = load_task(make_task(tmp_path / "word-count", toml, instruction=None, extra=extra))
    assert task.id == "acme/word-count"
    assert task.solution_dir is not None
