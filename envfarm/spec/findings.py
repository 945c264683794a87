"""One thing ``envfarm check`` found about a task: an error (unsound) or a warning (advice)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Severity = Literal["error", "warning"]


class Finding(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    severity: Severity
    rule: str
    message: str


def error(rule: str, message: str) -> Finding:
    return Finding(severity="error", rule=rule, message=message)


def warning(rule: str, message: str) -> Finding:
    return Finding(severity="warning", rule=rule, message=message)
