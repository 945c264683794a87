"""What ``envfarm check`` concludes about one task, and the rules that read episodes into it.

``problems`` make a task unsound (exit 2), ``infra`` are the machine's faults (exit 1), warnings
are advice. The rules are pure functions of the trajectories, so they are tested without Docker.
"""

from __future__ import annotations

from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from envfarm.check.steps import StepCheck
from envfarm.grading.rubric.scoring import COMPONENT_PREFIX, COMPONENT_TESTS
from envfarm.models.trajectory import Trajectory
from envfarm.spec.findings import Finding

EPSILON = 1e-9
Verdict = Literal["sound", "unsound", "error", "lint-only"]


class TaskCheck(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task_id: str
    path: str
    max_reward: float = 1.0
    ran: bool = True
    """False with ``--no-run``: lint only."""
    rubric_items: list[str] = Field(default_factory=list)
    judge: str = "-"
    """``-`` (no rubric), ``unchecked`` (rubric, no judge) or ``judged``."""
    findings: list[Finding] = Field(default_factory=list)
    build: str = "-"
    oracle_rewards: list[float | None] = Field(default_factory=list)
    """The oracle's reward per run (None: no valid reward)."""
    oracle_tests: list[float] = Field(default_factory=list)
    """The part that must reach the maximum: the test reward of a judged rubric task, else the
    reward itself."""
    nop_reward: float | None = None
    steps: list[StepCheck] = Field(default_factory=list)
    """A multi-step task's steps, in order: each one's oracle and nop rewards (``steps``)."""
    mode_rewards: dict[str, float | None] = Field(default_factory=dict)
    """``--compare-modes``: the oracle's reward per verifier mode."""
    flaky: bool | None = None
    problems: list[str] = Field(default_factory=list)
    infra: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    info: list[str] = Field(default_factory=list)
    """How envfarm runs the task where that differs from Harbor (e.g. the network)."""
    notes: list[str] = Field(default_factory=list)
    """What explains a failed oracle: the verifier's last lines, where the artifacts are."""
    zero_on_flags: list[str] = Field(default_factory=lambda: ["report:*"])
    """The task's ``[verifier].zero_on_flags``: names the flags that zeroed an oracle's reward."""

    def add_findings(self, findings: list[Finding]) -> None:
        self.findings += findings
        for finding in findings:
            text = f"{finding.rule}: {finding.message}"
            kept = {"error": self.problems, "warning": self.warnings, "info": self.info}
            kept[finding.severity].append(text)

    @property
    def lint_errors(self) -> int:
        return sum(1 for f in self.findings if f.severity == "error")

    @property
    def lint_warnings(self) -> int:
        return sum(1 for f in self.findings if f.severity == "warning")

    @property
    def verdict(self) -> Verdict:
        if self.problems:
            return "unsound"
        if self.infra:
            return "error"
        return "sound" if self.ran else "lint-only"


def _solve_note(trajectory: Trajectory) -> str:
    """What solve.sh said, when it failed: its exit code and the end of its output."""
    for turn in trajectory.turns:
        for result in turn.tool_results:
            if result.name == "bash" and result.exit_code not in (0, None):
                tail = " | ".join(result.output.strip().splitlines()[-3:])[:300]
                return f" (solve.sh exited {result.exit_code}: {tail})" if tail else ""
    return ""


def _no_reward(check: TaskCheck, who: str, trajectory: Trajectory) -> None:
    """File a trajectory without a valid reward under problems or infra."""
    error = trajectory.error
    reason = trajectory.reward.reason or "no reason given"
    if error is None:
        check.problems.append(f"{who}: no valid reward: {reason}")
        return
    verifier_fault = error.phase == "grading" and error.type == "GradingError"
    judge_down = verifier_fault and "rubric judging failed" in error.message
    if verifier_fault and not judge_down:
        check.problems.append(f"{who}: the verifier gave no reward: {clip(error.message)}")
    elif not error.infrastructure:  # the task as configured, refused: it fails the same again
        check.problems.append(f"{who}: {error.phase} failed ({error.type}): {clip(error.message)}")
    else:
        check.infra.append(f"{who}: {error.phase} failed ({error.type}): {clip(error.message)}")


def clip(message: str, limit: int = 1500) -> str:
    """``message`` within ``limit`` characters: its first line (what failed) and its end (an
    output's tail, where the error is), whole lines."""
    if len(message) <= limit:
        return message
    first = message.split("\n", 1)[0][:300]
    tail = message[len(message) - (limit - len(first)) :]
    if "\n" in tail:
        tail = tail.split("\n", 1)[1]
    return f"{first}\n...\n{tail}"


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def _zeroed_note(check: TaskCheck, trajectory: Trajectory) -> str:
    """``; zeroed by report:unparsable (was 1): <detail>`` for a reward the flag policy zeroed."""
    reward = trajectory.reward
    before = reward.components.get("reward_before_flags")
    if before is None:
        return ""
    patterns = check.zero_on_flags
    hits = [f for f in reward.flags if any(fnmatchcase(f, p) for p in patterns)] or reward.flags
    details = [d for flag in hits for d in reward.flag_details.get(flag, [])][:2]
    shown = f": {'; '.join(details)}" if details else ""
    return f"; zeroed by {', '.join(hits)} (was {_fmt(before)}){shown}"


def judge_oracle(check: TaskCheck, runs: list[Trajectory], judged: bool) -> None:
    """Every oracle run must reach the maximum, and all runs must agree."""
    rubric_judged = judged and bool(check.rubric_items)
    for trajectory in runs:
        reward = trajectory.reward
        if not reward.valid or reward.value is None:
            check.oracle_rewards.append(None)
            _no_reward(check, "oracle", trajectory)
            continue
        check.oracle_rewards.append(reward.value)
        part = reward.components.get(COMPONENT_TESTS, reward.value) if rubric_judged else None
        check.oracle_tests.append(reward.value if part is None else part)
        for flag in reward.flags:
            if not flag.startswith("rubric:"):
                check.warnings.append(f"oracle: the reward is flagged {flag}")
        if rubric_judged:
            items = {
                key.removeprefix(COMPONENT_PREFIX): value
                for key, value in reward.components.items()
                if key.startswith(COMPONENT_PREFIX)
            }
            check.judge = "judged: " + ", ".join(f"{k} {_fmt(v)}" for k, v in items.items())
    scores = check.oracle_tests
    if not scores:
        return
    check.flaky = max(scores) - min(scores) > EPSILON
    if check.flaky:
        shown = ", ".join(_fmt(s) for s in scores)
        check.problems.append(
            f"flaky grader: the oracle's rewards differ over {len(scores)} runs ({shown}; "
            f"spread {_fmt(max(scores) - min(scores))})"
        )
        return
    best = scores[0]
    missed = best < check.max_reward - EPSILON
    note = _zeroed_note(check, runs[0]) + _solve_note(runs[0]) if missed else ""
    what = "the oracle's test reward" if rubric_judged else "the oracle"
    if best < check.max_reward - EPSILON:
        check.problems.append(
            f"oracle fails: {what} reaches {_fmt(best)}, not the maximum "
            f"{_fmt(check.max_reward)}{note}"
        )
    elif best > check.max_reward + EPSILON:
        check.problems.append(
            f"{what} reaches {_fmt(best)}, above the declared maximum "
            f"{_fmt(check.max_reward)} (metadata.max_reward)"
        )


def judge_nop(check: TaskCheck, runs: list[Trajectory], judged: bool) -> None:
    """Doing nothing must not reach the maximum. Where the oracle failed the task already, a nop
    at the maximum is no second problem but evidence of the first: a note on what it means."""
    for trajectory in runs:
        reward = trajectory.reward
        if not reward.valid or reward.value is None:
            _no_reward(check, "nop", trajectory)
            continue
        check.nop_reward = reward.value
        if reward.value < check.max_reward - EPSILON:
            continue
        if check.rubric_items and not judged:
            check.warnings.append(
                f"nop: the tests alone give {_fmt(reward.value)} (the maximum); the rubric, "
                "unchecked without a judge, must make the difference"
            )
            continue
        scored = f"doing nothing scores {_fmt(reward.value)}, the maximum"
        oracle = _oracle_failure(check)
        if oracle is None:
            check.problems.append(
                f"nop passes: {scored}; the tests do not tell a solved task from an untouched one"
            )
        else:
            check.notes.append(f"nop: {scored}, where {oracle}")


def _oracle_failure(check: TaskCheck) -> str | None:
    """How the oracle failed the task, read from what ``judge_oracle`` filed; None when it did
    not (it reached the maximum, or only the machine failed it)."""
    if check.flaky:
        return "the oracle's rewards differ from run to run: the nop's may be chance too"
    scores = check.oracle_tests
    if scores and scores[0] < check.max_reward - EPSILON:
        return (
            f"the oracle scores {_fmt(scores[0])}: the tests pass the untouched task and fail "
            "the solved one, so they check the opposite of what solve.sh does, or solve.sh "
            "breaks what they check"
        )
    if any(problem.startswith("oracle: ") for problem in check.problems):
        return (
            "the oracle's run has no valid reward: the verifier works on the untouched task, "
            "so what solve.sh leaves behind makes it fail"
        )
    return None


def judge_modes(check: TaskCheck, own: str, runs: Mapping[str, list[Trajectory]]) -> None:
    """``--compare-modes``: the oracle's reward must not depend on the verifier mode. ``own``:
    the task's mode (its reward is the first oracle run's); ``runs``: the oracle's runs in
    each other mode."""
    if check.oracle_rewards:
        check.mode_rewards[own] = check.oracle_rewards[0]
    for mode, trajectories in runs.items():
        for trajectory in trajectories:
            value = trajectory.reward.value if trajectory.reward.valid else None
            check.mode_rewards[mode] = value
    seen = check.mode_rewards
    if len(seen) > 1 and len(set(seen.values())) > 1:
        shown = ", ".join(f"{m} {_shown(r)}" for m, r in sorted(seen.items()))
        check.problems.append(f"verifier modes disagree: the oracle's reward is {shown}")


def _shown(reward: float | None) -> str:
    return "invalid" if reward is None else f"{reward:.3g}"
