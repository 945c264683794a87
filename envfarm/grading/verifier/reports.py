"""Test reports the verifier leaves in ``/logs/verifier``: JUnit XML and CTRF JSON (and a
runner's printed output named ``<name>.<parser>.log``, read by ``grading.test_logs``).

Both are parsed into ``ReportedTest`` values (name, status, duration) plus the count the report
itself claims (``<testsuite tests=...>``, CTRF ``summary.tests``), so that a report cut short can
be told from a complete one. A JUnit test id is ``classname::name`` (pytest's classname is the
dotted module path and class); a CTRF id is the test's ``name``. pytest's xfail shows up in
JUnit as a skip of type ``pytest.xfail`` and is reported as ``xfailed``.

A report that cannot be parsed is not an exception here: it is returned with ``problem`` set, and
the caller turns it into a ``report:unparsable`` flag.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

from envfarm.grading.verifier.test_logs import log_parser_of, parse_test_log
from envfarm.models.trajectory import ReportedTest, TestStatus

CONVENTIONAL_REPORTS = ("junit.xml", "ctrf.json")
_CTRF_STATUS: dict[str, TestStatus] = {
    "passed": "passed",
    "failed": "failed",
    "skipped": "skipped",
    "pending": "skipped",
    "other": "other",
}


@dataclass
class ParsedReport:
    name: str
    """Path relative to ``/logs/verifier``."""
    format: str
    tests: list[ReportedTest] = field(default_factory=list)
    claimed_total: int | None = None
    """The number of tests the report says it holds, when it says."""
    problem: str | None = None
    """Why the report could not be read; ``tests`` is then empty."""

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for test in self.tests:
            counts[test.status] = counts.get(test.status, 0) + 1
        return counts


def report_format(name: str, data: bytes) -> str | None:
    """``junit`` or ``ctrf`` from the name, else from the first bytes; None when neither.
    ``<name>.<parser>.log`` is a runner's printed output (``grading.test_logs``)."""
    parser = log_parser_of(name)
    if parser is not None:
        return f"{parser}-log"
    lowered = name.lower()
    if lowered.endswith(".xml"):
        return "junit"
    if lowered.endswith(".json"):
        return "ctrf"
    head = data.lstrip()[:1]
    return "junit" if head == b"<" else "ctrf" if head == b"{" else None


def parse_report(name: str, data: bytes) -> ParsedReport:
    kind = report_format(name, data)
    if kind == "junit":
        return parse_junit(name, data)
    if kind == "ctrf":
        return parse_ctrf(name, data)
    if kind is not None and kind.endswith("-log"):
        text = data.decode(errors="replace")
        return ParsedReport(name, kind, tests=parse_test_log(kind.removesuffix("-log"), text, name))
    return ParsedReport(name, "unknown", problem="neither JUnit XML nor CTRF JSON")


def _float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and number >= 0 else None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _junit_status(case: ET.Element) -> TestStatus:
    if case.find("error") is not None:
        return "error"
    if case.find("failure") is not None:
        return "failed"
    skipped = case.find("skipped")
    if skipped is not None:
        return "xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"
    return "passed"


def parse_junit(name: str, data: bytes) -> ParsedReport:
    report = ParsedReport(name, "junit")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        report.problem = f"not well-formed XML: {exc}"
        return report
    if root.tag not in ("testsuites", "testsuite"):
        report.problem = f"root element is <{root.tag}>, expected <testsuites> or <testsuite>"
        return report
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    leaf_suites = [s for s in suites if s.find("testsuite") is None]
    claimed = [_int(s.get("tests")) for s in leaf_suites]
    if claimed and all(c is not None for c in claimed):
        report.claimed_total = sum(c for c in claimed if c is not None)
    for case in root.iter("testcase"):
        classname, case_name = case.get("classname") or "", case.get("name") or ""
        test_id = f"{classname}::{case_name}" if classname else case_name
        report.tests.append(
            ReportedTest(
                name=test_id,
                status=_junit_status(case),
                duration_s=_float(case.get("time")),
                report=name,
            )
        )
    return report


def parse_ctrf(name: str, data: bytes) -> ParsedReport:
    report = ParsedReport(name, "ctrf")
    try:
        document = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        report.problem = f"not valid JSON: {exc}"
        return report
    results = document.get("results") if isinstance(document, dict) else None
    tests = results.get("tests") if isinstance(results, dict) else None
    if not isinstance(results, dict) or not isinstance(tests, list):
        report.problem = "expected a CTRF document: {'results': {'tests': [...]}}"
        return report
    summary = results.get("summary")
    if isinstance(summary, dict):
        report.claimed_total = _int(summary.get("tests"))
    for index, test in enumerate(tests):
        if not isinstance(test, dict) or not isinstance(test.get("name"), str):
            report.problem = f"results.tests[{index}] has no string 'name'"
            report.tests = []
            return report
        raw = str(test.get("status", "other")).lower()
        status = _CTRF_STATUS.get(raw, "other")
        if raw == "skipped" and str(test.get("rawStatus", "")).lower() == "xfailed":
            status = "xfailed"
        duration = _float(test.get("duration"))
        report.tests.append(
            ReportedTest(
                name=test["name"],
                status=status,
                duration_s=None if duration is None else duration / 1000,
                report=name,
            )
        )
    return report
