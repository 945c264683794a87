"""Test reports read from a runner's printed output, for suites that write no JUnit or CTRF.

A report named ``<anything>.<parser>.log`` under ``/logs/verifier`` is read by that parser:

- ``pytest``: the short test summary of ``-rA`` (``PASSED tests/x.py::test_a``, ``FAILED ...
  - reason``, ``ERROR``, ``XFAIL``, ``XPASS``; ``SKIPPED [N] file:line: reason`` counts N tests
  named ``file:line``). An XPASS counts as passed, as pytest's summary counts it.
- ``django``: Django's runner at ``--verbosity 2`` (``test_a (app.tests.Case) ... ok``, ``FAIL``,
  ``ERROR``, ``skipped '...'``, ``expected failure``, ``unexpected success``); a test whose
  docstring is printed has its result on the next line, which is followed.
- ``sympy``: ``bin/test --verbose`` (``test_a ok``, ``F``, ``E``, ``f`` expected failure, ``X``
  unexpected pass, ``s`` skipped, ``w`` slow).

Test ids are the runner's own, as SWE-bench's FAIL_TO_PASS/PASS_TO_PASS lists name them.
"""

from __future__ import annotations

import re

from envfarm.models.trajectory import ReportedTest, TestStatus

LOG_PARSERS = ("pytest", "django", "sympy")
_PYTEST_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)\s+(.+?)\s*$")
_PYTEST_SKIP_COUNT = re.compile(r"^\[(\d+)\]\s+(.*?)(?::\s.*)?$")
_PYTEST_STATUS: dict[str, TestStatus] = {
    "PASSED": "passed",
    "FAILED": "failed",
    "ERROR": "error",
    "XFAIL": "xfailed",
    "XPASS": "passed",
    "SKIPPED": "skipped",
}
_DJANGO_START = re.compile(r"^(\S+ \([\w.]+\))(?: .*)?$")
_DJANGO_STATUS: dict[str, TestStatus] = {
    "ok": "passed",
    "FAIL": "failed",
    "ERROR": "error",
    "expected failure": "xfailed",
    "unexpected success": "failed",
}
_SYMPY_LINE = re.compile(r"^(test_\w+)\s+(ok|F|E|f|X|s|w|Slow|Skipped)\b")
_SYMPY_STATUS: dict[str, TestStatus] = {
    "ok": "passed",
    "F": "failed",
    "E": "error",
    "f": "xfailed",
    "X": "passed",
    "s": "skipped",
    "Skipped": "skipped",
    "w": "skipped",
    "Slow": "skipped",
}


def log_parser_of(name: str) -> str | None:
    """The parser a report's name asks for (``swebench.pytest.log`` -> ``pytest``)."""
    parts = name.rsplit("/", 1)[-1].split(".")
    if len(parts) >= 3 and parts[-1] == "log" and parts[-2] in LOG_PARSERS:
        return parts[-2]
    return None


def _test(name: str, status: TestStatus, report: str) -> ReportedTest:
    return ReportedTest(name=name, status=status, duration_s=None, report=report)


def parse_pytest_log(text: str, report: str) -> list[ReportedTest]:
    tests: list[ReportedTest] = []
    for line in text.splitlines():
        found = _PYTEST_LINE.match(line)
        if found is None:
            continue
        word, rest = found.groups()
        status = _PYTEST_STATUS[word]
        if word == "SKIPPED":
            counted = _PYTEST_SKIP_COUNT.match(rest)
            if counted is not None:
                tests += [_test(counted.group(2), status, report)] * int(counted.group(1))
                continue
        tests.append(_test(rest.split(" - ", 1)[0].strip(), status, report))
    return tests


def parse_django_log(text: str, report: str) -> list[ReportedTest]:
    tests: list[ReportedTest] = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        started = _DJANGO_START.match(line)
        if started is None:
            continue
        result = _django_result(line)
        if result is None and index + 1 < len(lines) and " ... " not in line:
            result = _django_result("x " + lines[index + 1])  # the docstring line
        if result is not None:
            tests.append(_test(started.group(1), result, report))
    return tests


def _django_result(line: str) -> TestStatus | None:
    _, sep, result = line.rpartition(" ... ")
    if not sep:
        return None
    result = result.strip()
    if result.startswith("skipped"):
        return "skipped"
    return _DJANGO_STATUS.get(result)


def parse_sympy_log(text: str, report: str) -> list[ReportedTest]:
    tests: list[ReportedTest] = []
    for line in text.splitlines():
        found = _SYMPY_LINE.match(line.strip())
        if found is not None:
            tests.append(_test(found.group(1), _SYMPY_STATUS[found.group(2)], report))
    return tests


def parse_test_log(parser: str, text: str, report: str) -> list[ReportedTest]:
    if parser == "django":
        return parse_django_log(text, report)
    if parser == "sympy":
        return parse_sympy_log(text, report)
    return parse_pytest_log(text, report)
