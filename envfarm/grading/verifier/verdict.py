"""From what the verifier left behind to a ``Reward``: one pure function, for grading and regrading.

``score`` reads a ``VerifierOutput`` (exit code, timeout, the files of ``/logs/verifier``), so a
live episode and ``envfarm regrade`` (which loads the same output from the artifacts) compute the
same reward. Precedence:

1. A verifier that timed out is invalid (``GradingError``), never 0.
2. With ``[verifier] fail_to_pass`` / ``pass_to_pass``, the lists decide: 1.0 when every listed
   test passed in sound reports, else 0.0 (valid, with the ``report:*`` flags that explain it).
   The reward file, if any, is kept as components (its ``reward`` key as ``verifier_reward``).
   Only a verifier that failed without leaving a report or a reward file is invalid.
3. Otherwise the reward file decides (``reward.json`` before ``reward.txt``); none is invalid.

``apply_flag_policy`` then lowers a valid reward to 0 when a flag matches
``[verifier].zero_on_flags`` (never raising a negative reward), keeping the value it had as the
``reward_before_flags`` component.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

from envfarm.errors import GradingError
from envfarm.grading.verifier.report_checks import EXIT_CODE_FILE, check_reports, read_exit_code
from envfarm.grading.verifier.reports import CONVENTIONAL_REPORTS, ParsedReport, parse_report
from envfarm.grading.verifier.reward import parse_reward_json, parse_reward_txt
from envfarm.grading.verifier.swebench import grade_lists
from envfarm.models.trajectory import ReportedTest, Reward
from envfarm.plan.models import VerifierPlan
from envfarm.spec.config import VerifierConfig

STDOUT_FILE = "test-stdout.txt"
REWARD_FILES = ("reward.json", "reward.txt")
MAX_TESTS = 5000
MAX_DETAILS = 10
TAIL_LINES = 30
TAIL_HEADING = "verifier output ends with:"
"""What precedes the tail of the verifier's output quoted in a ``GradingError``'s message."""
_REPORT_IN_SCRIPT = re.compile(
    r"/logs/verifier/([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*\.(?:xml|json))"
)


@dataclass
class VerifierOutput:
    """What one run of ``tests/test.sh`` left: its status and the files of ``/logs/verifier``."""

    exit_code: int | None
    timed_out: bool
    timeout_sec: float
    duration_s: float = 0.0
    files: dict[str, bytes] = field(default_factory=dict)
    """Path relative to ``/logs/verifier`` -> content (large logs are kept as their tail)."""
    omitted: dict[str, str] = field(default_factory=dict)
    """Files not kept whole, and why."""

    @property
    def stdout(self) -> str:
        return self.files.get(STDOUT_FILE, b"").decode(errors="replace")

    def tail(self) -> str:
        lines = self.stdout.rstrip().splitlines()[-TAIL_LINES:]
        return (f"; {TAIL_HEADING}\n" + "\n".join(lines)) if lines else ""


def expected_reports(plan: VerifierPlan) -> list[str]:
    """Reports the task promises: ``[verifier].reports`` plus those ``test.sh`` names. Kept
    per task content hash (which covers test.sh): read once per task, not per episode."""
    key = (plan.tests_dir, plan.task_hash, tuple(plan.config.reports))
    if (known := _EXPECTED.get(key)) is not None:
        return list(known)
    try:
        script = (plan.tests_dir / "test.sh").read_text(encoding="utf-8", errors="replace")
    except OSError:
        script = ""
    named = [m for m in _REPORT_IN_SCRIPT.findall(script) if m not in REWARD_FILES]
    expected = list(dict.fromkeys([*plan.config.reports, *named]))
    if len(_EXPECTED) >= EXPECTED_KEPT:
        _EXPECTED.pop(next(iter(_EXPECTED)))
    _EXPECTED[key] = tuple(expected)
    return expected


EXPECTED_KEPT = 1024
_EXPECTED: dict[tuple[Path, str, tuple[str, ...]], tuple[str, ...]] = {}


def add_flags(reward: Reward, found: Iterable[tuple[str, str]]) -> Reward:
    """A copy of ``reward`` with the ``(flag, detail)`` pairs merged in."""
    flags, details = list(reward.flags), {k: list(v) for k, v in reward.flag_details.items()}
    for flag, detail in found:
        if flag not in flags:
            flags.append(flag)
        listed = details.setdefault(flag, [])
        if detail and detail not in listed and len(listed) < MAX_DETAILS:
            listed.append(detail)
    return reward.model_copy(update={"flags": sorted(flags), "flag_details": details})


def apply_flag_policy(reward: Reward, patterns: list[str]) -> Reward:
    if not reward.valid or reward.value is None or reward.value <= 0:
        return reward
    hits = [f for f in reward.flags if any(fnmatchcase(f, pattern) for pattern in patterns)]
    if not hits:
        return reward
    return reward.model_copy(
        update={
            "value": 0.0,
            "components": {**reward.components, "reward_before_flags": reward.value},
            "reason": f"zeroed by [verifier].zero_on_flags ({', '.join(hits)}); was "
            f"{reward.value:g} from {reward.reason}",
        }
    )


def finish_reward(
    reward: Reward,
    observed: Iterable[tuple[str, str]],
    zero_on_flags: list[str],
    scored: Reward | None = None,
) -> Reward:
    """The episode's final reward: ``observed`` flags (snapshots, commands) merged in, what a
    later grading step dropped restored from ``scored`` (the verifier's reward), then the flag
    policy applied."""
    if scored is not None:
        carried = [(f, d) for f, details in scored.flag_details.items() for d in details or [""]]
        reward = add_flags(reward, [*carried, *((f, "") for f in scored.flags)])
        if not reward.tests and scored.tests:
            reward = reward.model_copy(update={"tests": scored.tests})
    return apply_flag_policy(add_flags(reward, observed), zero_on_flags)


def _reward_file(output: VerifierOutput) -> Reward | None:
    """The reward file's reward; None when there is none; GradingError when it is unreadable."""
    for name, parse in (("reward.json", parse_reward_json), ("reward.txt", parse_reward_txt)):
        data = output.files.get(name)
        if data is None:
            continue
        try:
            text = data.decode()
        except UnicodeDecodeError as exc:
            raise GradingError(f"{name} is not UTF-8 text") from exc
        return parse(text)
    return None


def output_reports(
    output: VerifierOutput, expected: list[str], declared: list[str]
) -> list[ParsedReport]:
    """The expected and conventional reports among the verifier's files, parsed.

    A declared (``[verifier].reports``) or conventional report that cannot be read is returned
    with its problem (``report:unparsable``). A file known only because ``test.sh`` names it is
    a report only if it parses as one: a task's own JSON summary in ``/logs/verifier`` (``{"reward":
    1.0, "results": [...]}``) is not taken for a broken CTRF report."""
    strict = {*declared, *CONVENTIONAL_REPORTS}
    names = [*expected, *(n for n in CONVENTIONAL_REPORTS if n not in expected)]
    reports = []
    for name in names:
        if name in output.files:
            report = parse_report(name, output.files[name])
            if report.problem is None or name in strict:
                reports.append(report)
        elif name in output.omitted and name in strict:
            reports.append(ParsedReport(name, "unknown", problem=output.omitted[name]))
    return reports


def score(output: VerifierOutput, config: VerifierConfig, expected: list[str]) -> Reward:
    """The reward of one verifier run (before tamper flags and the flag policy)."""
    if output.timed_out:
        raise GradingError(f"the verifier timed out after {output.timeout_sec:g}s{output.tail()}")
    reports = output_reports(output, expected, config.reports)
    tests: list[ReportedTest] = [t for report in reports for t in report.tests][:MAX_TESTS]
    exit_code = read_exit_code(output.files.get(EXIT_CODE_FILE))
    present = {*output.files, *output.omitted}
    absent = [name for name in expected if name not in present]
    found = check_reports(reports, absent, output.stdout, exit_code)
    if config.fail_to_pass or config.pass_to_pass:
        reward = _score_lists(output, config, tests, found, reports)
    else:
        from_file = _reward_file(output)
        if from_file is None:
            raise GradingError(_no_reward_message(output))
        reward = from_file
    reward = reward.model_copy(update={"tests": tests})
    return add_flags(reward, found)


def _score_lists(
    output: VerifierOutput,
    config: VerifierConfig,
    tests: list[ReportedTest],
    found: list[tuple[str, str]],
    reports: list[ParsedReport],
) -> Reward:
    try:
        from_file = _reward_file(output)
    except GradingError:
        from_file = None
    crashed = output.exit_code not in (0, None) and not reports and from_file is None
    if crashed:
        raise GradingError(
            f"tests/test.sh failed (exit code {output.exit_code}) without writing a test report "
            f"or a reward file{output.tail()}"
        )
    problems = sorted({flag for flag, _ in found})
    if not reports:
        problems.append("no test report was written")
    verdict = grade_lists(config.fail_to_pass, config.pass_to_pass, tests, problems)
    components = dict(from_file.components) if from_file else {}
    if from_file is not None and from_file.value is not None:
        components.pop("reward", None)
        components["verifier_reward"] = from_file.value
    components.update(verdict.components)
    components["reward"] = verdict.value
    reason = verdict.reason
    if verdict.details:
        shown = verdict.details[:3]
        more = len(verdict.details) - len(shown)
        reason += ": " + "; ".join(shown) + (f" (+{more} more)" if more else "")
    extra = [] if reports else [("report:missing", "no test report was written")]
    reward = Reward(value=verdict.value, valid=True, components=components, reason=reason)
    return add_flags(reward, extra)


def _no_reward_message(output: VerifierOutput) -> str:
    if output.exit_code in (126, 127):
        return (
            f"the verifier could not start (exit code {output.exit_code}): tests/test.sh or a "
            f"command it needs is missing or not executable{output.tail()}"
        )
    return (
        f"tests/test.sh wrote no reward file (exit code {output.exit_code}); it must write "
        f"/logs/verifier/reward.json or reward.txt{output.tail()}"
    )
