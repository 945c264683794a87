"""A JSON file of the task's own in /logs/verifier is not taken for a broken test report: only
declared and conventional reports can be unparsable; a file test.sh merely names counts as a
report only if it parses as one. And ``envfarm check`` says which flag zeroed an oracle."""

from __future__ import annotations

from pathlib import Path

from envfarm.check.verdicts import TaskCheck, judge_oracle
from envfarm.grading.verifier.verdict import VerifierOutput, expected_reports, finish_reward, score
from envfarm.models.trajectory import Provenance, Trajectory
from envfarm.spec import load_task
from envfarm.spec.config import VerifierConfig
from tests.plans import verifier_plan

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "own-json-summary"
SUMMARY = b'{"reward": 1.0, "results": [{"name": "answer_is_done", "passed": true, "weight": 1}]}'
CTRF = (
    b'{"results": {"summary": {"tests": 1}, "tests": '
    b'[{"name": "test_answer", "status": "passed", "duration": 3}]}}'
)


def output(files: dict[str, bytes]) -> VerifierOutput:
    return VerifierOutput(0, False, timeout_sec=60, files=files)


def test_a_summary_the_script_names_is_not_a_report() -> None:
    task = load_task(FIXTURE)
    expected = expected_reports(verifier_plan(task))
    assert expected == ["report.json"]  # named by test.sh...
    reward = score(
        output({"report.json": SUMMARY, "reward.txt": b"1.0\n"}), task.config.verifier, expected
    )
    assert (reward.valid, reward.value, reward.flags, reward.tests) == (True, 1.0, [], [])


def test_a_named_file_that_parses_is_a_report_and_a_named_one_missing_still_counts() -> None:
    config = VerifierConfig()
    reward = score(output({"out.json": CTRF, "reward.txt": b"1"}), config, ["out.json"])
    assert [(t.name, t.status) for t in reward.tests] == [("test_answer", "passed")]
    assert reward.flags == []
    gone = score(output({"reward.txt": b"1"}), config, ["out.json"])
    assert gone.flags == ["report:missing"]


def test_declared_and_conventional_reports_must_parse() -> None:
    declared = VerifierConfig(reports=["report.json"])
    reward = score(output({"report.json": SUMMARY, "reward.txt": b"1"}), declared, ["report.json"])
    assert reward.flags == ["report:unparsable"]
    assert reward.flag_details["report:unparsable"][0].startswith("report.json: ")
    broken = score(output({"junit.xml": b"<testsuite", "reward.txt": b"1"}), VerifierConfig(), [])
    assert broken.flags == ["report:unparsable"]
    assert finish_reward(broken, [], ["report:*"]).value == 0.0


def test_check_names_the_flag_that_zeroed_the_oracle() -> None:
    scored = score(output({"junit.xml": b"<testsuite", "reward.txt": b"1"}), VerifierConfig(), [])
    zeroed = finish_reward(scored, [], ["report:*"])
    trajectory = Trajectory(
        trajectory_id="t",
        episode_id="ep1",
        job_id="j",
        group_id="g",
        task_id="task",
        provenance=Provenance(task_hash="h", envfarm_version="test"),
        reward=zeroed,
    )
    check = TaskCheck(task_id="task", path=".")
    judge_oracle(check, [trajectory], judged=False)
    (problem,) = check.problems
    assert problem.startswith("oracle fails: the oracle reaches 0, not the maximum 1; ")
    assert "zeroed by report:unparsable (was 1): junit.xml: not well-formed XML" in problem
