"""Cross-checks that catch a test run that was cut short or lied about (``report:*`` flags).

A test process can be made to exit 0 early (``sys.exit(0)`` from a planted ``conftest.py``,
``os._exit(0)`` in the module under test), or to print its own summary. Each check compares two
witnesses the verifier left behind that must agree:

- an expected report (declared in ``[verifier].reports`` or named in ``tests/test.sh``) exists
  (``report:missing``), a declared or conventional one parses (``report:unparsable``; a file
  only named in ``test.sh`` that does not parse is not a report: ``verdict.output_reports``),
  and each holds tests (``report:empty``);
- a report holds as many tests as it claims, and as many as pytest said it collected
  (``report:incomplete``); a pytest session that started in the output printed its summary;
- pytest's printed summary agrees with the report (``report:summary_mismatch``);
- the test command's exit code, when ``test.sh`` records it in ``test-exit-code.txt``, agrees
  with the report and with the printed summary (``report:exit_mismatch``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from envfarm.grading.verifier.reports import ParsedReport

EXIT_CODE_FILE = "test-exit-code.txt"
_SESSION_START = re.compile(r"^=+ test session starts =+\s*$", re.MULTILINE)
_SUMMARY = re.compile(
    r"^=*\s*(?P<counts>(?:\d+ [a-z]+(?:, )?)+|no tests ran) in [\d.]+s(?: \([^)]*\))?\s*=*\s*$",
    re.MULTILINE,
)
_COLLECTED = re.compile(r"^collected (\d+) items?(?: / (\d+) deselected)?", re.MULTILINE)
_COUNT = re.compile(r"(\d+) ([a-z]+)")
_PLURALS = {"errors": "error", "warnings": "warning", "reruns": "rerun"}
BAD = ("failed", "error")
MISSING = "report:missing"


@dataclass(frozen=True)
class PytestOutput:
    sessions: int
    summaries: list[dict[str, int]]
    collected: list[int]
    """Per ``collected N items`` line: the tests selected (collected minus deselected)."""


def read_pytest_output(stdout: str) -> PytestOutput:
    summaries = []
    for match in _SUMMARY.finditer(stdout):
        counts: dict[str, int] = {}
        for number, word in _COUNT.findall(match.group("counts")):
            key = _PLURALS.get(word, word)
            counts[key] = counts.get(key, 0) + int(number)
        summaries.append(counts)
    collected = [int(m.group(1)) - int(m.group(2) or 0) for m in _COLLECTED.finditer(stdout)]
    return PytestOutput(len(_SESSION_START.findall(stdout)), summaries, collected)


def read_exit_code(data: bytes | None) -> int | None:
    if data is None:
        return None
    try:
        return int(data.decode().strip())
    except (UnicodeDecodeError, ValueError):
        return None


def check_reports(
    reports: list[ParsedReport],
    expected: list[str],
    stdout: str,
    exit_code: int | None,
) -> list[tuple[str, str]]:
    """``(flag, detail)`` for every disagreement found; empty when all witnesses agree.
    ``expected``: the reports that must be among ``reports`` (``report:missing``)."""
    found: list[tuple[str, str]] = []
    names = {report.name for report in reports}
    found += [(MISSING, f"{name} was not written") for name in expected if name not in names]
    good = [report for report in reports if report.problem is None]
    for report in reports:
        if report.problem is not None:
            found.append(("report:unparsable", f"{report.name}: {report.problem}"))
        elif not report.tests:
            found.append(("report:empty", f"{report.name} holds no test"))
        elif report.claimed_total is not None and report.claimed_total > len(report.tests):
            found.append(
                (
                    "report:incomplete",
                    f"{report.name} claims {report.claimed_total} tests but holds "
                    f"{len(report.tests)}",
                )
            )
    pytest = read_pytest_output(stdout)
    if pytest.sessions > len(pytest.summaries):
        found.append(
            ("report:incomplete", "a pytest session started but never printed its summary")
        )
    counts = _merged(good)
    if len(pytest.collected) == 1 and len(good) == 1:
        held = len(good[0].tests)
        if held < pytest.collected[0]:
            found.append(
                (
                    "report:incomplete",
                    f"pytest collected {pytest.collected[0]} tests, {good[0].name} holds {held}",
                )
            )
    if len(pytest.summaries) == 1 and len(good) == 1:
        found += _summary_vs_report(pytest.summaries[0], counts)
    if exit_code is not None:
        found += _exit_code_checks(exit_code, good, counts, pytest.summaries)
    return found


def _merged(reports: list[ParsedReport]) -> dict[str, int]:
    total: dict[str, int] = {}
    for report in reports:
        for status, number in report.counts().items():
            total[status] = total.get(status, 0) + number
    return total


def _summary_vs_report(summary: dict[str, int], counts: dict[str, int]) -> list[tuple[str, str]]:
    printed_bad = sum(summary.get(k, 0) for k in BAD)
    reported_bad = sum(counts.get(k, 0) for k in BAD)
    printed_ok = summary.get("passed", 0) + summary.get("xpassed", 0)
    reported_ok = counts.get("passed", 0)
    if printed_bad != reported_bad or printed_ok != reported_ok:
        return [
            (
                "report:summary_mismatch",
                f"pytest printed {printed_ok} passed / {printed_bad} failed or errors; the "
                f"report holds {reported_ok} passed / {reported_bad} failed or errors",
            )
        ]
    return []


def _exit_code_checks(
    code: int,
    reports: list[ParsedReport],
    counts: dict[str, int],
    summaries: list[dict[str, int]],
) -> list[tuple[str, str]]:
    found = []
    reported_bad = sum(counts.get(k, 0) for k in BAD)
    if reports and code == 0 and reported_bad:
        found.append(
            (
                "report:exit_mismatch",
                f"the tests exited 0 but the reports hold {reported_bad} failed or errors",
            )
        )
    if reports and code != 0 and counts and not reported_bad:
        found.append(
            ("report:exit_mismatch", f"the tests exited {code} but every reported test passed")
        )
    for summary in summaries:
        printed_bad = sum(summary.get(k, 0) for k in BAD)
        if code == 0 and printed_bad:
            found.append(("report:exit_mismatch", "the tests exited 0 but pytest printed failures"))
        elif code not in (0, 5) and summary and not printed_bad:
            found.append(
                ("report:exit_mismatch", f"the tests exited {code} but pytest printed no failure")
            )
    return found
