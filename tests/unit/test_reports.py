"""JUnit XML and CTRF JSON parsing, and the cross-checks between reports, output and exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envfarm.grading.verifier.report_checks import check_reports, read_exit_code, read_pytest_output
from envfarm.grading.verifier.reports import ParsedReport, parse_ctrf, parse_junit, parse_report

SUITE = """import pytest


def test_pass():
    pass


def test_fail():
    assert 1 == 2


@pytest.fixture
def broken():
    raise RuntimeError("fixture")


def test_error(broken):
    pass


@pytest.mark.skip(reason="no")
def test_skip():
    pass


@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False


@pytest.mark.parametrize("n", [1, 2])
def test_param(n):
    assert n
"""


@pytest.fixture(scope="module")
def pytest_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, str, int]:
    """A real pytest run of SUITE: its JUnit report, its output and its exit code."""
    root = tmp_path_factory.mktemp("suite")
    (root / "test_suite.py").write_text(SUITE)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-rA",
            "--rootdir",
            str(root),
            "-c",
            "/dev/null",
            f"--junitxml={root / 'junit.xml'}",
            str(root / "test_suite.py"),
        ],
        capture_output=True,
        text=True,
        cwd=root,
        check=False,
    )
    return (root / "junit.xml").read_bytes(), proc.stdout, proc.returncode


def test_junit_from_a_real_pytest_run(pytest_run: tuple[bytes, str, int]) -> None:
    data, _, _ = pytest_run
    report = parse_junit("junit.xml", data)
    assert report.problem is None
    statuses = {t.name: t.status for t in report.tests}
    assert statuses == {
        "test_suite::test_pass": "passed",
        "test_suite::test_fail": "failed",
        "test_suite::test_error": "error",
        "test_suite::test_skip": "skipped",
        "test_suite::test_xfail": "xfailed",
        "test_suite::test_param[1]": "passed",
        "test_suite::test_param[2]": "passed",
    }
    assert report.claimed_total == 7
    assert all(t.duration_s is not None and t.duration_s >= 0 for t in report.tests)
    assert {t.report for t in report.tests} == {"junit.xml"}


def test_a_real_pytest_run_passes_every_cross_check(pytest_run: tuple[bytes, str, int]) -> None:
    data, stdout, code = pytest_run
    assert code == 1
    output = read_pytest_output(stdout)
    assert output.sessions == 1
    assert output.collected == [7]
    [summary] = output.summaries
    assert summary == {"failed": 1, "passed": 3, "skipped": 1, "xfailed": 1, "error": 1}
    assert check_reports([parse_junit("junit.xml", data)], ["junit.xml"], stdout, code) == []


def test_ctrf() -> None:
    document = {
        "results": {
            "tool": {"name": "pytest"},
            "summary": {"tests": 3, "passed": 1, "failed": 1, "skipped": 1},
            "tests": [
                {"name": "tests/test_a.py::test_one", "status": "passed", "duration": 12},
                {"name": "tests/test_a.py::test_two", "status": "failed", "duration": 3},
                {"name": "t3", "status": "skipped", "rawStatus": "xfailed"},
            ],
        }
    }
    report = parse_ctrf("ctrf.json", json.dumps(document).encode())
    assert [(t.name, t.status, t.duration_s) for t in report.tests] == [
        ("tests/test_a.py::test_one", "passed", 0.012),
        ("tests/test_a.py::test_two", "failed", 0.003),
        ("t3", "xfailed", None),
    ]
    assert report.claimed_total == 3


@pytest.mark.parametrize(
    ("name", "data", "problem"),
    [
        ("junit.xml", b"<testsuite><testcase", "not well-formed XML"),
        ("junit.xml", b"<html/>", "root element is <html>"),
        ("ctrf.json", b"{", "not valid JSON"),
        ("ctrf.json", b'{"results": {}}', "expected a CTRF document"),
        ("ctrf.json", b'{"results": {"tests": [{"status": "passed"}]}}', "no string 'name'"),
        ("report.txt", b"PASSED", "neither JUnit XML nor CTRF JSON"),
    ],
)
def test_unreadable_reports_say_why(name: str, data: bytes, problem: str) -> None:
    report = parse_report(name, data)
    assert report.tests == []
    assert problem in (report.problem or "")


def test_the_format_is_sniffed_when_the_name_does_not_say() -> None:
    assert parse_report("results", b'  <testsuite tests="0"/>').format == "junit"
    assert parse_report("results", b'{"results": {"tests": []}}').format == "ctrf"


def junit(*cases: str, tests: int | None = None) -> ParsedReport:
    claimed = f' tests="{tests}"' if tests is not None else ""
    return parse_junit("junit.xml", f"<testsuite{claimed}>{''.join(cases)}</testsuite>".encode())


PASSED = '<testcase classname="m" name="a"/>'
FAILED = '<testcase classname="m" name="b"><failure/></testcase>'


def flags(found: list[tuple[str, str]]) -> list[str]:
    return [flag for flag, _ in found]


def test_a_missing_or_empty_or_truncated_report_is_flagged() -> None:
    assert flags(check_reports([], ["junit.xml"], "", None)) == ["report:missing"]
    assert flags(check_reports([junit()], ["junit.xml"], "", None)) == ["report:empty"]
    assert flags(check_reports([junit(PASSED, tests=3)], [], "", None)) == ["report:incomplete"]


def test_output_that_disagrees_with_the_report_is_flagged() -> None:
    started = "============ test session starts ============\ncollected 3 items\n"
    # a session that never printed its summary (it was killed or exited early)
    assert "report:incomplete" in flags(check_reports([junit(PASSED)], [], started, None))
    # fewer tests in the report than pytest collected
    finished = started + "==== 1 passed in 0.01s ====\n"
    assert "report:incomplete" in flags(check_reports([junit(PASSED)], [], finished, None))
    # the printed summary and the report disagree
    printed = "collected 2 items\n==== 1 failed, 1 passed in 0.02s ====\n"
    found = check_reports([junit(PASSED, PASSED)], [], printed, None)
    assert flags(found) == ["report:summary_mismatch"]


def test_an_exit_code_that_disagrees_is_flagged() -> None:
    assert flags(check_reports([junit(PASSED, FAILED)], [], "", 0)) == ["report:exit_mismatch"]
    assert flags(check_reports([junit(PASSED)], [], "", 1)) == ["report:exit_mismatch"]
    assert flags(check_reports([junit(PASSED)], [], "", 0)) == []
    assert flags(check_reports([junit(PASSED, FAILED)], [], "", 1)) == []
    quiet = "1 failed, 1 passed in 0.02s\n"
    assert flags(check_reports([], [], quiet, 0)) == ["report:exit_mismatch"]
    assert flags(check_reports([], [], "no tests ran in 0.01s\n", 5)) == []


@pytest.mark.parametrize(("data", "code"), [(b"0\n", 0), (b" 2", 2), (b"x", None), (None, None)])
def test_exit_code_file(data: bytes | None, code: int | None) -> None:
    assert read_exit_code(data) == code


def test_an_unparsable_report_is_flagged(tmp_path: Path) -> None:
    found = check_reports([parse_report("junit.xml", b"<oops")], ["junit.xml"], "", None)
    assert flags(found) == ["report:unparsable"]
