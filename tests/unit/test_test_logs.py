"""Runners' printed output read as test reports (pytest -rA, Django's runner, sympy's)."""

from __future__ import annotations

from envfarm.grading.verifier.reports import parse_report
from envfarm.grading.verifier.swebench import grade_lists

PYTEST = b"""============================= test session starts ==============================
collected 6 items

tests/test_core.py ..F.sx                                                [100%]

=========================== short test summary info ============================
PASSED tests/test_core.py::test_add
PASSED tests/test_core.py::test_sub[1-2]
PASSED tests/test_core.py::TestMul::test_mul
SKIPPED [1] tests/test_core.py:20: not today
XFAIL tests/test_core.py::test_div - known
FAILED tests/test_core.py::test_mod - AssertionError: assert 1 == 2
==================== 1 failed, 3 passed, 1 skipped, 1 xfailed in 0.05s ==========
"""

DJANGO = b"""Testing against Django installed in '/testbed/django'
test_add (calc.tests.AddTests) ... ok
test_sub (calc.tests.SubTests) ... FAIL
test_doc (calc.tests.DocTests)
The docstring of the test. ... ok
test_skip (calc.tests.SkipTests) ... skipped 'no database'
test_err (calc.tests.ErrTests.test_err) ... ERROR
test_xfail (calc.tests.X) ... expected failure

----------------------------------------------------------------------
Ran 6 tests in 0.01s
"""

SYMPY = b"""============================= test process starts ==============================
sympy/core/tests/test_basic.py[4]
test_add ok
test_sub F
test_err E
test_known f                                                                  [FAIL]
"""


def statuses(name: str, data: bytes) -> dict[str, str]:
    report = parse_report(name, data)
    assert report.problem is None
    return {t.name: t.status for t in report.tests}


def test_pytest_short_summary() -> None:
    assert statuses("swebench.pytest.log", PYTEST) == {
        "tests/test_core.py::test_add": "passed",
        "tests/test_core.py::test_sub[1-2]": "passed",
        "tests/test_core.py::TestMul::test_mul": "passed",
        "tests/test_core.py:20": "skipped",
        "tests/test_core.py::test_div": "xfailed",
        "tests/test_core.py::test_mod": "failed",
    }


def test_django_runner_with_a_docstring_line() -> None:
    assert statuses("swebench.django.log", DJANGO) == {
        "test_add (calc.tests.AddTests)": "passed",
        "test_sub (calc.tests.SubTests)": "failed",
        "test_doc (calc.tests.DocTests)": "passed",
        "test_skip (calc.tests.SkipTests)": "skipped",
        "test_err (calc.tests.ErrTests.test_err)": "error",
        "test_xfail (calc.tests.X)": "xfailed",
    }


def test_sympy_runner() -> None:
    assert statuses("swebench.sympy.log", SYMPY) == {
        "test_add": "passed",
        "test_sub": "failed",
        "test_err": "error",
        "test_known": "xfailed",
    }


def test_lists_are_graded_against_a_log_report() -> None:
    tests = parse_report("swebench.django.log", DJANGO).tests
    resolved = grade_lists(
        ["test_add (calc.tests.AddTests)"], ["test_doc (calc.tests.DocTests)"], tests, []
    )
    assert resolved.value == 1.0
    broken = grade_lists(
        ["test_add (calc.tests.AddTests)"], ["test_sub (calc.tests.SubTests)"], tests, []
    )
    assert broken.value == 0.0
    assert broken.details == ["PASS_TO_PASS not passed: test_sub (calc.tests.SubTests) (failed)"]


def test_other_log_names_are_not_reports() -> None:
    assert parse_report("build.log", b"PASSED x").problem is not None
