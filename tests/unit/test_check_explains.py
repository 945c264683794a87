"""``envfarm check`` explains itself, and limits and refusals are read as bad input (no Docker:
the engine's side is in tests/docker/test_harbor_tasks.py)."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

from envfarm.check.explain import TAIL_LINES, explain_oracle
from envfarm.check.pipeline import CheckConfig, check_tasks
from envfarm.check.verdicts import TaskCheck, judge_oracle
from envfarm.controller.summary import EXIT_BAD_INPUT, EXIT_INFRA, summarize
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.models.trajectory import ErrorInfo, Provenance, Reward, Trajectory
from envfarm.plan.planner import environment_spec
from envfarm.sandbox.docker.limits import clamp_limits
from envfarm.sandbox.images.offline import resolve_offline
from envfarm.spec import load_task


def episode(
    reward: float | None, artifacts: str | None, error: ErrorInfo | None = None
) -> Trajectory:
    return Trajectory(
        trajectory_id="t",
        episode_id="ep1",
        job_id="j",
        group_id="g",
        task_id="task",
        provenance=Provenance(task_hash="h", envfarm_version="test"),
        reward=Reward(value=reward, valid=reward is not None, reason="test"),
        artifacts=artifacts,
        error=error,
    )


def test_a_missed_maximum_shows_the_verifiers_last_lines_and_the_artifacts(tmp_path: Path) -> None:
    verifier = tmp_path / "artifacts" / "ep1" / "verifier"
    verifier.mkdir(parents=True)
    lines = [f"line {n}" for n in range(30)]
    (verifier / "test-stdout.txt").write_text("\n".join([*lines, "FAILED test_answer"]) + "\n")
    notes = explain_oracle(
        TaskCheck(task_id="task", path="."), [episode(0.0, "artifacts/ep1")], tmp_path
    )
    assert notes[0] == f"oracle ep1: artifacts in {tmp_path / 'artifacts' / 'ep1'}"
    assert notes[1] == f"verifier output (last {TAIL_LINES} of 31 lines):"
    assert notes[-1] == "  | FAILED test_answer"
    assert len(notes) == 2 + TAIL_LINES


def test_a_verifier_without_a_reward_is_pointed_to_not_quoted_twice(tmp_path: Path) -> None:
    root = tmp_path / "artifacts" / "ep1"
    (root / "verifier").mkdir(parents=True)
    (root / "verifier.json").write_text('{"exit_code": 1}')
    (root / "verifier" / "test-stdout.txt").write_text("collected 3 items\nImportError\n")
    fault = ErrorInfo(
        type="GradingError",
        message="tests/test.sh wrote no reward file (exit code 1); verifier output ends with:\n"
        "collected 3 items\nImportError",
        phase="grading",
    )
    check = TaskCheck(task_id="task", path=".")
    notes = explain_oracle(check, [episode(None, "artifacts/ep1", fault)], tmp_path)
    stdout = root / "verifier" / "test-stdout.txt"
    assert notes[1:] == [f"the verifier's output (2 lines, its end quoted above): {stdout}"]


def test_no_output_says_why_there_is_none(tmp_path: Path) -> None:
    check = TaskCheck(task_id="task", path=".")
    (tmp_path / "artifacts" / "ran").mkdir(parents=True)
    (tmp_path / "artifacts" / "ran" / "verifier.json").write_text('{"exit_code": 0}')
    notes = explain_oracle(check, [episode(0.0, "artifacts/ran")], tmp_path)
    assert notes[1].startswith("the verifier left no test-stdout.txt: tests/test.sh removed it")
    (tmp_path / "artifacts" / "never").mkdir()
    fault = ErrorInfo(type="GradingError", message="the workdir was not captured", phase="grading")
    notes = explain_oracle(check, [episode(None, "artifacts/never", fault)], tmp_path)
    assert notes[1] == "no verifier output was kept: the grading phase failed (GradingError)"


def test_an_oracle_at_the_maximum_needs_no_explanation(tmp_path: Path) -> None:
    assert (
        explain_oracle(TaskCheck(task_id="task", path="."), [episode(1.0, "a/ep1")], tmp_path) == []
    )


def test_an_oracle_that_never_reached_grading_says_so(tmp_path: Path) -> None:
    error = ErrorInfo(type="SandboxStartError", message="x", phase="provision")
    notes = explain_oracle(
        TaskCheck(task_id="task", path="."), [episode(None, None, error)], tmp_path
    )
    assert notes == ["oracle ep1: no artifacts kept (the provision phase failed)"]


def test_limits_above_the_machine_are_clamped_with_a_warning() -> None:
    cpus, memory, warnings = clamp_limits(8, 65536, (2.0, 7900))
    assert (cpus, memory) == (2.0, 7900)
    assert warnings == [
        "cpus = 8 is more than the 2 this machine has: the task runs with 2",
        "memory_mb = 65536 is more than the 7900 MB this machine has: the task runs with 7900 MB",
    ]
    assert clamp_limits(1.5, 2048, (2.0, 7900)) == (1.5, 2048, [])


def test_a_refused_configuration_makes_the_run_bad_input() -> None:
    refused = ErrorInfo(
        type="TaskConfigError", message="x", phase="provision", infrastructure=False
    )
    crashed = ErrorInfo(type="SandboxStartError", message="x", phase="provision", retryable=True)
    common = {"job_id": "j", "policy": "oracle", "model": "m", "bad_inputs": {}, "duration_s": 1}
    assert summarize([episode(None, None, refused)], **common).exit_code == EXIT_BAD_INPUT  # type: ignore[arg-type]
    assert summarize([episode(None, None, crashed)], **common).exit_code == EXIT_INFRA  # type: ignore[arg-type]


def make_task(root: Path, dockerfile: str, compose: str = "") -> Path:
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "solution").mkdir()
    (root / "task.toml").write_text('[task]\nname = "t/images"\nkind = "demo"\n')
    (root / "instruction.md").write_text("Do it.\n")
    (root / "environment" / "Dockerfile").write_text(textwrap.dedent(dockerfile))
    (root / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (root / "solution" / "solve.sh").write_text("true\n")
    if compose:
        (root / "environment" / "docker-compose.yaml").write_text(textwrap.dedent(compose))
    return root


def test_no_run_resolves_every_base_image_without_pulling(tmp_path: Path) -> None:
    dockerfile = """\
    ARG PY=3.11
    FROM python:${PY}-slim AS build
    FROM build
    COPY --from=example.org/tools/helper:1 /bin/helper /bin/helper
    """
    compose = "services:\n  db:\n    image: registry.example/acme/db:2\n"
    task = load_task(make_task(tmp_path / "t", dockerfile, compose))
    resolved = {item.reference: item.how for item in resolve_offline(environment_spec(task))}
    assert set(resolved) == {
        "python:3.11-slim",
        "example.org/tools/helper:1",
        "registry.example/acme/db:2",
    }
    assert resolved["python:3.11-slim"].startswith("alias:")
    assert (
        resolved["example.org/tools/helper:1"] == resolved["registry.example/acme/db:2"] == "pull"
    )
    held = {
        item.reference: item.how
        for item in resolve_offline(environment_spec(task), lambda ref: "db" in ref)
    }
    assert held["registry.example/acme/db:2"] == "local"
    report = asyncio.run(check_tasks([task], [], None, TestScriptGrader(), CheckConfig(run=False)))
    (check,) = report.checks
    assert check.verdict == "lint-only"
    pulled = [w for w in check.warnings if w.startswith("images:") and "a run pulls it" in w]
    assert len(pulled) == 2
    assert any(w.startswith("tolerated:") and "task.kind" in w for w in check.warnings)


def test_a_refused_configuration_makes_the_task_unsound_not_an_infra_error() -> None:
    check = TaskCheck(task_id="task", path=".")
    refused = ErrorInfo(
        type="TaskConfigError", message="cpus", phase="provision", infrastructure=False
    )
    judge_oracle(check, [episode(None, None, refused)], judged=False)
    assert check.infra == []
    assert check.problems == ["oracle: provision failed (TaskConfigError): cpus"]
