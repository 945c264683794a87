"""Harbor's multi-step tasks as loaded: ``[[steps]]`` and ``steps/NAME/``, good and bad, and how
the episode's reward comes from the steps' (``controller/steps.py``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envfarm.controller.steps import combine, step_tests
from envfarm.errors import TaskSpecError
from envfarm.models.trajectory import Reward
from envfarm.spec import load_task

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "harbor-steps"


def copy_fixture(tmp_path: Path, toml_tail: str = "") -> Path:
    root = tmp_path / "steps-task"
    shutil.copytree(FIXTURE, root)
    if toml_tail:
        with (root / "task.toml").open("a") as handle:
            handle.write(toml_tail)
    return root


def refusal(root: Path) -> str:
    with pytest.raises(TaskSpecError) as caught:
        load_task(root)
    return str(caught.value)


def test_the_fixture_loads_its_steps_in_order() -> None:
    task = load_task(FIXTURE)
    assert [s.name for s in task.steps] == ["create", "extend", "report"]
    assert task.instruction == ""
    assert task.warnings == ()
    create, extend, report = task.steps
    assert create.config.min_reward == 1.0
    assert extend.config.min_reward == {"reward": 0.5}
    assert extend.config.verifier.env == {"EXPECTED": "alpha beta"}
    assert extend.workdir_dir == FIXTURE / "steps" / "extend" / "workdir"
    assert create.tests_dirs == (FIXTURE / "tests", FIXTURE / "steps" / "create" / "tests")
    assert report.solution_dir == FIXTURE / "steps" / "report" / "solution"
    assert "stack.txt" in create.instruction


def test_a_steps_tests_are_the_tasks_with_its_own_over_them() -> None:
    task = load_task(FIXTURE)
    merged = step_tests(task, task.steps[0])
    assert sorted(p.name for p in merged.iterdir()) == ["lib.sh", "test.sh"]
    assert (merged / "test.sh").read_bytes() == (
        FIXTURE / "steps" / "create" / "tests" / "test.sh"
    ).read_bytes()


def test_a_step_falls_back_to_the_tasks_test_and_solution(tmp_path: Path) -> None:
    root = copy_fixture(tmp_path)
    shutil.rmtree(root / "steps" / "report" / "tests")
    shutil.rmtree(root / "steps" / "report" / "solution")
    (root / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (root / "solution").mkdir()
    (root / "solution" / "solve.sh").write_text("true\n")
    report = load_task(root).steps[-1]
    assert report.tests_dirs == (root / "tests",)
    assert report.solution_dir == root / "solution"


def test_a_missing_step_directory_names_it_and_nothing_else(tmp_path: Path) -> None:
    root = copy_fixture(tmp_path, '\n[[steps]]\nname = "extra"\n')
    message = refusal(root)
    assert str(root / "steps" / "extra") in message
    assert "step 'extra' keeps its instruction.md" in message
    assert "instruction.md holds the prompt" not in message  # the root one is not required
    assert "tests/test.sh grades the episode" not in message


def test_a_step_without_instruction_or_tests_is_refused_naming_the_files(tmp_path: Path) -> None:
    root = copy_fixture(tmp_path)
    (root / "steps" / "report" / "instruction.md").unlink()
    shutil.rmtree(root / "steps" / "report" / "tests")
    message = refusal(root)
    assert str(root / "steps" / "report" / "instruction.md") in message
    assert str(root / "steps" / "report" / "tests" / "test.sh") in message
    assert "neither exists" in message


@pytest.mark.parametrize(
    ("tail", "field", "words"),
    [
        ('\n[[steps]]\nname = "CREATE"\n', "steps[3].name", "earlier step ('create')"),
        ('\n[[steps]]\nname = "a/b"\n', "steps[3].name", "directory name under steps/"),
        ("\n[[steps]]\nmin_reward = 1\n", "steps[3].name", "missing"),
        ('\n[[steps]]\nname = "x"\nmin_reward = "high"\n', "steps[3].min_reward", ""),
        ('\n[[steps]]\nname = "x"\n[steps.agent]\nnetwork_mode = "public"\n', "", "set it in"),
    ],
)
def test_bad_steps_are_refused_naming_file_and_field(
    tmp_path: Path, tail: str, field: str, words: str
) -> None:
    message = refusal(copy_fixture(tmp_path, tail))
    assert str(tmp_path / "steps-task" / "task.toml") in message
    assert field in message
    assert words in message


def test_an_unknown_strategy_lists_the_allowed_ones(tmp_path: Path) -> None:
    root = copy_fixture(tmp_path)
    toml = (root / "task.toml").read_text().replace('"mean"', '"median"')
    (root / "task.toml").write_text(toml)
    message = refusal(root)
    assert "multi_step_reward_strategy" in message
    assert "'mean'" in message
    assert "'final'" in message


def test_a_verifier_mode_a_step_cannot_have_is_refused(tmp_path: Path) -> None:
    root = copy_fixture(tmp_path)
    toml = (root / "task.toml").read_text()
    toml = toml.replace(
        "[steps.verifier]\ntimeout_sec = 30\n",
        '[steps.verifier]\ntimeout_sec = 30\nenvironment_mode = "separate"\n',
    )
    (root / "task.toml").write_text(toml)
    message = refusal(root)
    assert "steps[1].verifier.environment_mode" in message
    assert "graded in the agent's sandbox" in message


def test_a_verifier_image_of_a_steps_own_is_refused(tmp_path: Path) -> None:
    root = copy_fixture(tmp_path, '\n[steps.verifier.environment]\ndocker_image = "x"\n')
    assert "steps[2].verifier.environment" in refusal(root)


def test_empty_steps_are_a_single_step_task_and_a_lone_strategy_is_a_warning(
    tmp_path: Path,
) -> None:
    root = tmp_path / "single"
    (root / "tests").mkdir(parents=True)
    (root / "environment").mkdir()
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "tests" / "test.sh").write_text("true\n")
    (root / "instruction.md").write_text("Do it.\n")
    (root / "task.toml").write_text('multi_step_reward_strategy = "final"\nsteps = []\n')
    task = load_task(root)
    assert task.steps == ()
    assert [w.field for w in task.warnings] == ["multi_step_reward_strategy"]


def reward(value: float, **components: float) -> Reward:
    return Reward(value=value, valid=True, components=components or {"reward": value})


def test_mean_is_harbors_per_key_mean_over_the_graded_steps() -> None:
    combined = combine([reward(1.0), reward(0.5, reward=0.5, lines=2.0)], None)
    assert combined.valid
    assert combined.value == 0.75
    assert combined.components == {"reward": 0.75, "lines": 1.0}
    skipped = Reward(reason="workdir/setup.sh exited 1")
    assert combine([reward(1.0), skipped], "mean").value == 1.0


def test_final_is_the_last_steps_and_needs_it_graded() -> None:
    assert combine([reward(0.0), reward(1.0)], "final").value == 1.0
    ungraded = combine([reward(1.0), Reward(reason="healthcheck failed")], "final")
    assert not ungraded.valid
    assert "healthcheck failed" in (ungraded.reason or "")
    assert not combine([], "mean").valid
