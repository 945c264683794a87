"""Harbor's multi-step tasks (``[[steps]]``): each step's files, checked as the task is loaded.

A multi-step task keeps, for each ``[[steps]]`` entry named ``NAME``, a directory
``steps/NAME/`` holding ``instruction.md`` (required: the step's prompt), ``tests/`` (its tests:
``tests/test.sh`` there, else the task's own ``tests/test.sh``; the task's ``tests/`` is uploaded
first and the step's over it, as Harbor merges them), ``solution/solve.sh`` (the oracle's for the
step; else the task's ``solution/``) and ``workdir/`` (copied into the working directory before
the step's agent; a ``workdir/setup.sh`` there is run then). The root ``instruction.md`` and
``tests/test.sh`` are not required.

Refused are the step fields envfarm cannot honour yet, each naming its field: a step's own
network, context budget, rubric items or collect hooks, and a verifier mode other than the one
the step gets (``controller/steps.py``: a step before the last is graded in the agent's own
sandbox, Harbor's ``shared``, since the next step goes on there; the last as the task's
``[verifier].environment_mode`` says). Step names must differ once case and Unicode are folded,
as Harbor requires.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from pathlib import Path

from envfarm.spec.config import NOT_YET, StepConfig, TaskConfig
from envfarm.spec.errors_fmt import Issue
from envfarm.spec.layout import read_instruction

STEPS_DIR = "steps"
_AGENT_REFUSED = ("network_mode", "allowed_hosts", "context_budget_tokens")
_VERIFIER_REFUSED = ("network_mode", "allowed_hosts", "rubrics", "rubric", "collect")


@dataclass(frozen=True)
class TaskStep:
    """One step as loaded: its entry of ``task.toml`` and where its files are."""

    config: StepConfig
    instruction: str
    tests_dirs: tuple[Path, ...]
    """Uploaded to ``/tests`` in this order (the task's ``tests/``, then the step's)."""
    solution_dir: Path | None
    """The directory holding the oracle's ``solve.sh`` for this step; None: it has none."""
    workdir_dir: Path | None
    """``steps/NAME/workdir/``, copied into the working directory before the step's agent."""

    @property
    def name(self) -> str:
        return self.config.name


def load_steps(
    root: Path, config: TaskConfig
) -> tuple[tuple[TaskStep, ...], list[Issue], list[Issue]]:
    """The steps of the task at ``root``, with every problem and warning of them."""
    toml = str(root / "task.toml")
    issues: list[Issue] = []
    warnings: list[Issue] = []
    steps: list[TaskStep] = []
    if not config.steps:
        if config.multi_step_reward_strategy is not None:
            warnings.append(
                Issue(toml, "multi_step_reward_strategy", "has no effect without [[steps]]")
            )
        return (), issues, warnings
    seen: dict[str, str] = {}
    for index, step in enumerate(config.steps):
        where = f"steps[{index}]"
        key = unicodedata.normalize("NFC", step.name).casefold()
        if key in seen:
            issues.append(
                Issue(
                    toml,
                    f"{where}.name",
                    f"{step.name!r} is the name of an earlier step ({seen[key]!r}); step names "
                    "must differ, case and Unicode normalization included",
                )
            )
            continue
        seen[key] = step.name
        last = index == len(config.steps) - 1
        issues += [Issue(toml, f"{where}.{f}", m) for f, m in _refused(step, config, last)]
        if step.artifacts and not last:
            warnings.append(
                Issue(toml, f"{where}.artifacts", "collected once, after the last step")
            )
        loaded = _load_step(root, step, issues)
        if loaded is not None:
            steps.append(loaded)
    return tuple(steps), issues, warnings


def _refused(step: StepConfig, config: TaskConfig, last: bool) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for name in _AGENT_REFUSED:
        if name in step.agent.model_fields_set:
            found.append((f"agent.{name}", f"a step's own {name} is {NOT_YET}; set it in [agent]"))
    for name in _VERIFIER_REFUSED:
        if name in step.verifier.model_fields_set:
            found.append(
                (f"verifier.{name}", f"a step's own {name} is {NOT_YET}; set it in [verifier]")
            )
    if "environment_mode" in step.verifier.model_fields_set:
        mode = step.verifier.environment_mode
        task_mode = config.verifier.environment_mode
        if not last and mode != "shared":
            found.append(
                (
                    "verifier.environment_mode",
                    f"{mode!r} for a step before the last is {NOT_YET}: such a step is graded "
                    "in the agent's sandbox ('shared'), where the next step goes on",
                )
            )
        elif last and mode != task_mode:
            found.append(
                (
                    "verifier.environment_mode",
                    f"{mode!r} differs from [verifier].environment_mode ({task_mode!r}), which "
                    "grades the last step; set the mode there",
                )
            )
    return found


def _load_step(root: Path, step: StepConfig, issues: list[Issue]) -> TaskStep | None:
    step_dir = root / STEPS_DIR / step.name
    if not step_dir.is_dir():
        issues.append(
            Issue(
                str(step_dir),
                None,
                f"missing: step {step.name!r} keeps its instruction.md, tests/ and solution/ here",
            )
        )
        return None
    instruction, problems = read_instruction(step_dir / "instruction.md")
    issues += problems
    shared_tests, own_tests = root / "tests", step_dir / "tests"
    if not (own_tests / "test.sh").is_file() and not (shared_tests / "test.sh").is_file():
        issues.append(
            Issue(
                str(own_tests / "test.sh"),
                None,
                f"missing: step {step.name!r} is graded by steps/{step.name}/tests/test.sh, or "
                "else the task's tests/test.sh; neither exists",
            )
        )
    tests = tuple(d for d in (shared_tests, own_tests) if d.is_dir())
    solution: Path | None = step_dir / "solution"
    if not (step_dir / "solution" / "solve.sh").is_file():
        solution = root / "solution" if (root / "solution" / "solve.sh").is_file() else None
    workdir = step_dir / "workdir"
    return TaskStep(
        config=step,
        instruction=instruction,
        tests_dirs=tests,
        solution_dir=solution,
        workdir_dir=workdir if workdir.is_dir() else None,
    )
