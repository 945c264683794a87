"""SWE-bench style grading: FAIL_TO_PASS and PASS_TO_PASS test lists against parsed reports.

A listed id matches a reported test when both name the same test once normalized: ``/`` and
``::`` become ``.``, a ``.py`` suffix goes, and the parametrization (``[...]``) is compared as
is. A shorter id matches a longer one that ends with it at a dot boundary, so the pytest node
id ``tests/test_x.py::TestA::test_b`` matches JUnit's ``tests.test_x.TestA::test_b`` and
``test_x.py::test_b`` matches ``pkg.test_x::test_b``. When an id matches several reported tests
(a planted duplicate), every one of them must pass.

A FAIL_TO_PASS test passes when ``passed`` or ``xfailed``; a PASS_TO_PASS test may also be
``skipped`` (not a regression). A listed test absent from every report has not passed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from envfarm.models.trajectory import ReportedTest

F2P_OK = frozenset({"passed", "xfailed"})
P2P_OK = frozenset({"passed", "xfailed", "skipped"})
_PARAMS = re.compile(r"(\[.*\])$")


def normalize_test_id(test_id: str) -> str:
    params = ""
    found = _PARAMS.search(test_id)
    if found is not None:
        params, test_id = found.group(1), test_id[: found.start()]
    path = test_id.replace("::", ".").replace("/", ".").replace(".py.", ".")
    path = path.removesuffix(".py").strip(".")
    return path + params


def _matches(listed: str, reported: str) -> bool:
    if listed == reported:
        return True
    short, long = sorted((listed, reported), key=len)
    return long.endswith("." + short)


@dataclass
class ListOutcome:
    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    """Listed ids that did not pass, with the statuses seen."""
    missing: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.passed) + len(self.failed) + len(self.missing)

    @property
    def fraction(self) -> float:
        return len(self.passed) / self.total if self.total else 1.0


def evaluate(listed: list[str], tests: list[ReportedTest], ok: frozenset[str]) -> ListOutcome:
    index = [(normalize_test_id(t.name), t) for t in tests]
    outcome = ListOutcome()
    for test_id in listed:
        wanted = normalize_test_id(test_id)
        statuses = [t.status for key, t in index if _matches(wanted, key)]
        if not statuses:
            outcome.missing.append(test_id)
        elif all(status in ok for status in statuses):
            outcome.passed.append(test_id)
        else:
            outcome.failed.append(f"{test_id} ({', '.join(sorted(set(statuses)))})")
    return outcome


@dataclass
class ListsVerdict:
    value: float
    components: dict[str, float]
    reason: str
    details: list[str]
    """Which listed tests did not pass, for ``flag_details``."""


def grade_lists(
    fail_to_pass: list[str],
    pass_to_pass: list[str],
    tests: list[ReportedTest],
    report_problems: list[str],
) -> ListsVerdict:
    """1.0 only when every listed test passed and the reports are sound, else 0.0."""
    f2p = evaluate(fail_to_pass, tests, F2P_OK)
    p2p = evaluate(pass_to_pass, tests, P2P_OK)
    components = {"fail_to_pass": f2p.fraction, "pass_to_pass": p2p.fraction}
    details = [f"FAIL_TO_PASS not passed: {item}" for item in f2p.failed] + [
        f"PASS_TO_PASS not passed: {item}" for item in p2p.failed
    ]
    details += [f"not in any report: {item}" for item in f2p.missing + p2p.missing]
    resolved = not details and not report_problems
    if resolved:
        reason = f"FAIL_TO_PASS {f2p.total}/{f2p.total}, PASS_TO_PASS {p2p.total}/{p2p.total}"
    elif report_problems:
        reason = "the test reports cannot be trusted: " + "; ".join(report_problems)
    else:
        reason = (
            f"FAIL_TO_PASS {len(f2p.passed)}/{f2p.total}, "
            f"PASS_TO_PASS {len(p2p.passed)}/{p2p.total} passed"
        )
    return ListsVerdict(1.0 if resolved else 0.0, components, reason, details)
