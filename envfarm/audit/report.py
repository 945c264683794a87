"""What an audit found: each probe's verdict with its evidence, per task, and the count.

A probe whose command could not give an answer (timed out, exited with an unexpected code, the
session ended before it ran) is an ``error``: reported as such, never counted as a tell.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from envfarm.audit.battery import CompareRule, MatchRule, Probe, Severity
from envfarm.settings import Realism

Verdict = Literal["tell", "clean", "error"]
EVIDENCE_CHARS = 600
EXIT_MARKER = re.compile(r"\n?\[exit code: -?\d+\]\s*$")
OPS: dict[str, Callable[[float, float], bool]] = {
    "lt": operator.lt, "le": operator.le, "gt": operator.gt,
    "ge": operator.ge, "eq": operator.eq, "ne": operator.ne,
}  # fmt: skip


class ProbeResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    category: str
    severity: Severity
    verdict: Verdict
    evidence: str = ""
    """For a tell, the output that showed it; for an error, what went wrong."""
    reference: str
    command: str
    exit_code: int | None = None
    duration_s: float = 0.0


class TaskAudit(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: str
    realism: Realism | None = None
    """The profile the episode ran with, as its plan decided."""
    job_id: str | None = None
    episode_id: str | None = None
    error: str | None = None
    """Why the task could not be audited (its environment did not start); None when it was."""
    bad_input: bool = False
    probes: list[ProbeResult] = Field(default_factory=list)

    @property
    def tells(self) -> list[ProbeResult]:
        return [p for p in self.probes if p.verdict == "tell"]


class AuditReport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_: Literal["envfarm.audit/1"] = Field(default="envfarm.audit/1", alias="schema")
    tasks: list[TaskAudit] = Field(default_factory=list)
    bad_inputs: dict[str, str] = Field(default_factory=dict)
    """Paths that held no runnable task, and why."""
    tells: int = 0
    probe_errors: int = 0
    host: list[ProbeResult] | None = None
    """``--compare-host``: the battery's verdicts on the machine that ran the audit (never
    counted: a server is no workstation)."""

    def counted(self) -> AuditReport:
        self.tells = sum(len(t.tells) for t in self.tasks)
        self.probe_errors = sum(1 for t in self.tasks for p in t.probes if p.verdict == "error")
        return self

    def tell_ids(self, task: str | None = None) -> set[str]:
        return {p.id for t in self.tasks if task in (None, t.task) for p in t.tells}

    @property
    def exit_code(self) -> int:
        """0: no tell; 1: some tell; 2: some input was bad; 3: some task could not be audited
        for an infrastructure reason (its environment did not start)."""
        if self.bad_inputs or any(t.bad_input for t in self.tasks):
            return 2
        if any(t.error for t in self.tasks):
            return 3
        return 1 if self.tells else 0


def judge(probe: Probe, output: str, exit_code: int | None, error: str | None) -> ProbeResult:
    """The probe's verdict from what the agent's ``bash`` tool answered."""
    text = EXIT_MARKER.sub("", output)
    result = ProbeResult(
        id=probe.id, category=probe.category, severity=probe.severity, verdict="clean",
        reference=probe.reference, command=probe.command, exit_code=exit_code,
    )  # fmt: skip
    if error is not None or exit_code not in probe.exit_codes:
        result.verdict = "error"
        why = error or f"exit code {exit_code}, expected {probe.exit_codes}"
        result.evidence = _clip(f"{why}\n{text}".strip())
        return result
    rule = probe.rule
    found = list(rule.regex().finditer(text))
    if isinstance(rule, MatchRule):
        if found:
            result.verdict, result.evidence = "tell", _clip("\n".join(_lines(text, found)))
    elif isinstance(rule, CompareRule):
        if found:
            values = found[0].groupdict()
            try:
                a = float(values["a"])
                b = float(values["b"]) if "b" in values else float(rule.than or 0)
            except (TypeError, ValueError):
                result.verdict = "error"
                result.evidence = _clip(f"not numbers to compare: {found[0].group(0)!r}")
                return result
            if OPS[rule.op](a, b):
                result.verdict, result.evidence = "tell", _clip(text.strip())
    elif not found:
        result.verdict, result.evidence = "tell", _clip(text.strip() or "(no output)")
    return result


def _lines(text: str, found: list[re.Match[str]]) -> list[str]:
    """The whole lines the matches are on, each once, in order."""
    lines: list[str] = []
    for match in found:
        start = text.rfind("\n", 0, match.start()) + 1
        end = text.find("\n", match.end())
        for line in text[start : end if end >= 0 else len(text)].splitlines():
            if line not in lines:
                lines.append(line)
    return lines


def _clip(text: str) -> str:
    if len(text) <= EVIDENCE_CHARS:
        return text
    return text[:EVIDENCE_CHARS] + f" [... {len(text) - EVIDENCE_CHARS} more characters]"
