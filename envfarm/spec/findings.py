"""One thing ``envfarm check`` found about a task: an error (unsound), a warning (advice) or an
info (how envfarm will run it, where that differs from Harbor)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Severity = Literal["error", "warning", "info"]


class Finding(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    severity: Severity
    rule: str
    message: str


def error(rule: str, message: str) -> Finding:
    return Finding(severity="error", rule=rule, message=message)


def warning(rule: str, message: str) -> Finding:
    return Finding(severity="warning", rule=rule, message=message)


def info(rule: str, message: str) -> Finding:
    return Finding(severity="info", rule=rule, message=message)
