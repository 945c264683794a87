"""The rules that read oracle and nop episodes into a check verdict (no Docker needed)."""

from __future__ import annotations

from envfarm.check.verdicts import TaskCheck, clip, judge_nop, judge_oracle
from envfarm.models.trajectory import (
    ErrorInfo,
    Provenance,
    Reward,
    ToolResult,
    Trajectory,
    Turn,
)


def episode(
    reward: float | None,
    *,
    error: ErrorInfo | None = None,
    components: dict[str, float] | None = None,
    flags: list[str] | None = None,
    solve_exit: int = 0,
    solve_output: str = "",
) -> Trajectory:
    valid = reward is not None
    return Trajectory(
        trajectory_id="t",
        episode_id="e",
        job_id="j",
        group_id="g",
        task_id="task",
        provenance=Provenance(task_hash="h", envfarm_version="test"),
        reward=Reward(
            value=reward,
            valid=valid,
            components=components or ({"reward": reward} if valid else {}),
            flags=flags or [],
            reason="test" if valid else "failed",
        ),
        error=error,
        turns=[
            Turn(
                index=0,
                tool_results=[
                    ToolResult(
                        call_id="c",
                        name="bash",
                        arguments="{}",
                        output=solve_output,
                        exit_code=solve_exit,
                    )
                ],
            )
        ],
    )


def check(**fields: object) -> TaskCheck:
    return TaskCheck.model_validate({"task_id": "task", "path": "/t", **fields})


def test_a_sound_task() -> None:
    result = check()
    judge_oracle(result, [episode(1.0), episode(1.0), episode(1.0)], judged=False)
    judge_nop(result, [episode(0.25)], judged=False)
    assert result.verdict == "sound"
    assert (result.oracle_rewards, result.nop_reward, result.flaky) == ([1.0] * 3, 0.25, False)


def test_an_oracle_below_the_maximum_fails_with_what_solve_sh_said() -> None:
    result = check()
    runs = [episode(0.5, solve_exit=2, solve_output="x\nTraceback\nNameError: y")] * 2
    judge_oracle(result, runs, judged=False)
    assert result.verdict == "unsound"
    [problem] = result.problems
    assert problem.startswith("oracle fails: the oracle reaches 0.5, not the maximum 1")
    assert "solve.sh exited 2" in problem
    assert "NameError: y" in problem


def test_disagreeing_oracle_runs_are_flaky_with_their_spread() -> None:
    result = check()
    judge_oracle(result, [episode(1.0), episode(0.25), episode(1.0)], judged=False)
    assert result.flaky is True
    [problem] = result.problems
    assert "flaky grader" in problem
    assert "1, 0.25, 1" in problem
    assert "spread 0.75" in problem


def test_a_nop_that_reaches_the_maximum_is_rejected() -> None:
    result = check()
    judge_oracle(result, [episode(1.0)], judged=False)
    judge_nop(result, [episode(1.0)], judged=False)
    assert result.verdict == "unsound"
    assert result.problems == [
        "nop passes: doing nothing scores 1, the maximum; the tests do not tell a solved task "
        "from an untouched one"
    ]


def test_a_nop_at_the_maximum_explains_a_failed_oracle_rather_than_adding_a_problem() -> None:
    below = check()
    judge_oracle(below, [episode(0.0)], judged=False)
    judge_nop(below, [episode(1.0)], judged=False)
    [problem] = below.problems
    assert problem.startswith("oracle fails: the oracle reaches 0")
    assert below.notes == [
        "nop: doing nothing scores 1, the maximum, where the oracle scores 0: the tests pass the "
        "untouched task and fail the solved one, so they check the opposite of what solve.sh "
        "does, or solve.sh breaks what they check"
    ]
    assert below.nop_reward == 1.0
    fault = ErrorInfo(type="GradingError", message="tests/test.sh wrote no reward", phase="grading")
    no_reward = check()
    judge_oracle(no_reward, [episode(None, error=fault)], judged=False)
    judge_nop(no_reward, [episode(1.0)], judged=False)
    assert [p.split(":")[0] for p in no_reward.problems] == ["oracle"]
    assert "where the oracle's run has no valid reward" in no_reward.notes[0]
    flaky = check()
    judge_oracle(flaky, [episode(1.0), episode(0.0)], judged=False)
    judge_nop(flaky, [episode(1.0)], judged=False)
    assert [p.split(":")[0] for p in flaky.problems] == ["flaky grader"]
    assert "the nop's may be chance too" in flaky.notes[0]


def test_a_nop_at_the_maximum_is_a_problem_when_only_the_machine_failed_the_oracle() -> None:
    result = check()
    gone = ErrorInfo(type="SandboxGone", message="the container vanished", phase="agent")
    judge_oracle(result, [episode(None, error=gone)], judged=False)
    judge_nop(result, [episode(1.0)], judged=False)
    assert [p.split(":")[0] for p in result.problems] == ["nop passes"]
    assert result.notes == []


def test_a_declared_maximum_replaces_one() -> None:
    result = check(max_reward=10.0)
    judge_oracle(result, [episode(10.0), episode(10.0)], judged=False)
    judge_nop(result, [episode(1.0)], judged=False)
    assert result.verdict == "sound"
    above = check()
    judge_oracle(above, [episode(2.0)], judged=False)
    assert "above the declared maximum 1" in above.problems[0]


def test_a_verifier_without_a_reward_is_the_tasks_fault() -> None:
    result = check()
    fault = ErrorInfo(type="GradingError", message="tests/test.sh wrote no reward", phase="grading")
    judge_oracle(result, [episode(None, error=fault)], judged=False)
    assert result.verdict == "unsound"
    assert result.problems == ["oracle: the verifier gave no reward: tests/test.sh wrote no reward"]
    assert result.oracle_rewards == [None]


def test_sandbox_and_judge_failures_are_infrastructure() -> None:
    result = check()
    gone = ErrorInfo(type="SandboxGone", message="the container vanished", phase="agent")
    judge_down = ErrorInfo(
        type="GradingError",
        message="rubric judging failed, so the reward is invalid: x",
        phase="grading",
    )
    judge_oracle(result, [episode(None, error=gone), episode(None, error=judge_down)], judged=True)
    assert result.problems == []
    assert result.verdict == "error"
    assert len(result.infra) == 2
    assert "agent failed (SandboxGone)" in result.infra[0]


def test_rubric_task_without_a_judge() -> None:
    result = check(rubric_items=["readability"], judge="unchecked")
    judge_oracle(result, [episode(1.0, flags=["rubric:unjudged"])] * 2, judged=False)
    judge_nop(result, [episode(1.0, flags=["rubric:unjudged"])], judged=False)
    assert result.verdict == "sound"
    assert result.judge == "unchecked"
    assert any("must make the difference" in w for w in result.warnings)


def test_rubric_task_with_a_judge_needs_the_test_part_at_the_maximum() -> None:
    components = {"tests:reward": 1.0, "rubric:readability": 0.6, "reward": 1.0}
    result = check(rubric_items=["readability"], judge="judged")
    judge_oracle(result, [episode(0.8, components=components)] * 2, judged=True)
    assert result.verdict == "sound"
    assert result.judge == "judged: readability 0.6"
    failing = check(rubric_items=["readability"])
    low = {**components, "tests:reward": 0.5}
    judge_oracle(failing, [episode(0.55, components=low)], judged=True)
    assert "the oracle's test reward reaches 0.5" in failing.problems[0]


def test_flags_on_the_oracle_are_warnings() -> None:
    result = check()
    judge_oracle(result, [episode(1.0, flags=["tamper:tests-modified"])], judged=False)
    assert result.verdict == "sound"
    assert result.warnings == ["oracle: the reward is flagged tamper:tests-modified"]


def test_a_long_message_keeps_its_first_line_and_its_end() -> None:
    output = "\n".join(f"Get:{n} http://deb.example/debian trixie InRelease" for n in range(200))
    message = f"tests/test.sh wrote no reward file (exit code 1)\n{output}\ncurl: (6) no host"
    clipped = clip(message)
    assert len(clipped) <= 1500
    assert clipped.startswith("tests/test.sh wrote no reward file (exit code 1)\n...\n")
    assert clipped.endswith("curl: (6) no host")
    assert clip("short") == "short"
