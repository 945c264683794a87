"""From verifier output to reward: reward files, FAIL_TO_PASS/PASS_TO_PASS, flags and policy."""

from __future__ import annotations

import pytest

from envfarm.errors import GradingError
from envfarm.grading.verifier.swebench import grade_lists, normalize_test_id
from envfarm.grading.verifier.verdict import VerifierOutput, apply_flag_policy, finish_reward, score
from envfarm.models.trajectory import ReportedTest, Reward
from envfarm.spec.config import VerifierConfig

JUNIT_ADD_FAILS = (
    b'<testsuite tests="2"><testcase classname="tests.test_calc" name="test_add">'
    b'<failure/></testcase><testcase classname="tests.test_calc" name="test_mul"/></testsuite>'
)
JUNIT_ALL_PASS = JUNIT_ADD_FAILS.replace(b"<failure/>", b"")


def output(
    exit_code: int | None = 0, files: dict[str, bytes] | None = None, timed_out: bool = False
) -> VerifierOutput:
    return VerifierOutput(exit_code, timed_out, timeout_sec=30, files=files or {})


def lists(**fields: object) -> VerifierConfig:
    return VerifierConfig.model_validate(
        {
            "fail_to_pass": ["tests/test_calc.py::test_add"],
            "pass_to_pass": ["tests/test_calc.py::test_mul"],
            **fields,
        }
    )


def test_reward_file_and_reports_together() -> None:
    reward = score(
        output(0, {"reward.json": b'{"reward": 0.5, "passed": 1}', "junit.xml": JUNIT_ADD_FAILS}),
        VerifierConfig(),
        ["junit.xml"],
    )
    assert (reward.value, reward.valid, reward.flags) == (0.5, True, [])
    assert reward.components == {"reward": 0.5, "passed": 1.0}
    assert [(t.name, t.status) for t in reward.tests] == [
        ("tests.test_calc::test_add", "failed"),
        ("tests.test_calc::test_mul", "passed"),
    ]


def test_timeouts_and_missing_rewards_are_invalid_not_zero() -> None:
    with pytest.raises(GradingError, match="timed out after 30s"):
        score(output(None, {"reward.txt": b"1"}, timed_out=True), VerifierConfig(), [])
    with pytest.raises(GradingError, match="wrote no reward file"):
        score(output(1), VerifierConfig(), [])
    with pytest.raises(GradingError, match="could not start"):
        score(output(127), VerifierConfig(), [])


def test_lists_decide_and_the_reward_file_becomes_components() -> None:
    passed = score(
        output(0, {"reward.json": b'{"reward": 0.0, "n": 2}', "junit.xml": JUNIT_ALL_PASS}),
        lists(),
        [],
    )
    assert (passed.value, passed.valid) == (1.0, True)
    assert passed.components == {
        "n": 2.0,
        "verifier_reward": 0.0,
        "fail_to_pass": 1.0,
        "pass_to_pass": 1.0,
        "reward": 1.0,
    }
    failed = score(output(1, {"junit.xml": JUNIT_ADD_FAILS}), lists(), [])
    assert (failed.value, failed.valid) == (0.0, True)
    assert "FAIL_TO_PASS not passed: tests/test_calc.py::test_add (failed)" in (failed.reason or "")


def test_lists_without_a_report_score_zero_with_a_flag_unless_the_verifier_crashed() -> None:
    silent = score(output(0, {"reward.txt": b"1"}), lists(), [])
    assert (silent.value, silent.valid) == (0.0, True)
    assert silent.flags == ["report:missing"]
    with pytest.raises(GradingError, match="without writing a test report"):
        score(output(2), lists(), [])


def test_lists_with_a_report_that_contradicts_the_exit_code_score_zero() -> None:
    reward = score(
        output(0, {"junit.xml": JUNIT_ALL_PASS, "test-exit-code.txt": b"1"}), lists(), []
    )
    assert (reward.value, reward.flags) == (0.0, ["report:exit_mismatch"])
    assert "cannot be trusted" in (reward.reason or "")


@pytest.mark.parametrize(
    ("listed", "reported"),
    [
        ("tests/test_calc.py::TestA::test_b", "tests.test_calc.TestA::test_b"),
        ("test_calc.py::test_b", "pkg.test_calc::test_b"),
        ("test_calc.py::test_b[1.5-x/y]", "test_calc::test_b[1.5-x/y]"),
        ("test_b", "test_calc::test_b"),
    ],
)
def test_listed_ids_match_reported_ids(listed: str, reported: str) -> None:
    tests = [ReportedTest(name=reported, status="passed", report="r")]
    assert grade_lists([listed], [], tests, []).value == 1.0


def test_ids_that_differ_do_not_match() -> None:
    tests = [ReportedTest(name="test_calc::test_bb", status="passed", report="r")]
    verdict = grade_lists(["test_calc.py::test_b"], [], tests, [])
    assert verdict.value == 0.0
    assert verdict.details == ["not in any report: test_calc.py::test_b"]
    assert normalize_test_id("a/b.py::C::d[x::y]") == "a.b.C.d[x::y]"


def test_a_planted_duplicate_cannot_hide_a_failure() -> None:
    tests = [
        ReportedTest(name="tests.test_calc::test_add", status="failed", report="junit.xml"),
        ReportedTest(name="evil.test_calc::test_add", status="passed", report="junit.xml"),
    ]
    assert grade_lists(["test_calc.py::test_add"], [], tests, []).value == 0.0


def test_skips_count_for_pass_to_pass_only() -> None:
    tests = [ReportedTest(name="m::t", status="skipped", report="r")]
    assert grade_lists([], ["m::t"], tests, []).value == 1.0
    assert grade_lists(["m::t"], [], tests, []).value == 0.0


def valid(value: float, *flags: str) -> Reward:
    return Reward(value=value, valid=True, components={"reward": value}, flags=list(flags))


def test_the_flag_policy_zeroes_matching_flags_but_never_raises_a_reward() -> None:
    zeroed = apply_flag_policy(valid(0.75, "tamper:conftest_added"), ["tamper:*"])
    assert zeroed.value == 0.0
    assert zeroed.components == {"reward": 0.75, "reward_before_flags": 0.75}
    assert "tamper:conftest_added" in (zeroed.reason or "")
    assert apply_flag_policy(valid(0.75, "read:hidden_path"), ["tamper:*"]).value == 0.75
    assert apply_flag_policy(valid(-1.0, "tamper:x"), ["*"]).value == -1.0
    invalid = Reward(flags=["tamper:x"])
    assert apply_flag_policy(invalid, ["*"]) == invalid


def test_finish_merges_observed_flags_and_restores_what_a_later_step_dropped() -> None:
    scored = valid(1.0, "report:summary_mismatch").model_copy(
        update={
            "flag_details": {"report:summary_mismatch": ["printed 1 passed"]},
            "tests": [ReportedTest(name="m::t", status="passed", report="r")],
        }
    )
    combined = Reward(value=0.8, valid=True, components={"tests:reward": 1.0})
    final = finish_reward(combined, [("tamper:pth_file", "/x.pth")], [], scored)
    assert final.value == 0.8
    assert final.flags == ["report:summary_mismatch", "tamper:pth_file"]
    assert final.flag_details == {
        "report:summary_mismatch": ["printed 1 passed"],
        "tamper:pth_file": ["/x.pth"],
    }
    assert final.tests == scored.tests
    assert finish_reward(combined, [("tamper:pth_file", "")], ["tamper:*"]).value == 0.0
