"""Turn validation problems into one readable ``TaskSpecError``.

Pydantic's own messages name neither the TOML table nor what would have been accepted, so each
error is rewritten here: an unknown field lists the allowed fields of its table, a bad literal
lists the allowed values, a wrong type names the expected type and the value given. Every problem
of a task is reported at once (one error, the first problem's file and field in front), so a task
author fixes a file in one pass instead of one field per run.
"""

from __future__ import annotations

import datetime as dt
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from envfarm.errors import TaskSpecError


@dataclass(frozen=True)
class Issue:
    """One problem: the file it is in, the dotted field (None for the file itself), the text."""

    path: str
    field: str | None
    message: str


@dataclass
class FileIssues:
    """What reading one file found: its problems (refusals) and its warnings, each an ``Issue``."""

    path: str
    issues: list[Issue] = field(default_factory=list)
    warnings: list[Issue] = field(default_factory=list)

    def problem(self, where: str | None, message: str) -> None:
        self.issues.append(Issue(self.path, where, message))

    def warn(self, where: str | None, message: str) -> None:
        self.warnings.append(Issue(self.path, where, message))


_EXPECTED = {
    "float_type": "a number",
    "float_parsing": "a number",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "dict_type": "a table",
    "model_type": "a table",
    "model_attributes_type": "a table",
    "list_type": "an array",
    "finite_number": "a finite number",
}

_BOUNDS = {
    "greater_than": ("gt", "greater than"),
    "greater_than_equal": ("ge", "at least"),
    "less_than": ("lt", "less than"),
    "less_than_equal": ("le", "at most"),
}


def toml_type(value: Any) -> str:
    """The TOML name of a parsed value's type, for "expected X, got <type> <value>"."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, dt.date | dt.time):
        return "date/time"
    return type(value).__name__


def dotted(loc: Sequence[int | str]) -> str:
    """``("task", "authors", 0, "name")`` -> ``"task.authors[0].name"``."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list, dict):
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return []


def model_at(root: type[BaseModel], loc: Sequence[int | str]) -> type[BaseModel] | None:
    """The model class that validates the table found at ``loc`` below ``root``."""
    model: type[BaseModel] = root
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        found = _models_in(field.annotation) if field is not None else []
        if not found:
            return None
        model = found[0]
    return model


def _describe(error: ErrorDetails, root: type[BaseModel]) -> str:
    kind = error["type"]
    value = error.get("input")
    ctx = error.get("ctx", {})
    if kind == "extra_forbidden":
        table_loc = error["loc"][:-1]
        model = model_at(root, table_loc)
        table = f"[{dotted(table_loc)}]" if table_loc else "the top level"
        if model is None:
            return "unknown field"
        allowed = ", ".join(model.model_fields)
        return f"unknown field; allowed fields of {table}: {allowed}"
    if kind == "missing":
        return "required field is missing"
    if kind == "literal_error":
        return f"allowed values: {ctx.get('expected')}; got {value!r}"
    if kind in _BOUNDS:
        key, words = _BOUNDS[kind]
        bound = ctx.get(key)
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return f"must be {words} {bound}, got {value!r}"
    if kind == "string_too_short":
        return "must not be empty"
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {toml_type(value)} {value!r}"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return f"{error['msg']}, got {value!r}"


def issues_from_validation(
    exc: ValidationError, path: str, root: type[BaseModel], prefix: Sequence[str] = ()
) -> list[Issue]:
    """One Issue per pydantic error, in pydantic's order (which follows the file's order)."""
    issues = []
    for error in exc.errors(include_url=False):
        loc = [*prefix, *error["loc"]]
        issues.append(Issue(path, dotted(loc) or None, _describe(error, root)))
    return issues


def issue_text(issue: Issue) -> str:
    """``path: field: message`` (the field left out when there is none)."""
    where = f"{issue.path}: {issue.field}" if issue.field else issue.path
    return f"{where}: {issue.message}"


def spec_error(issues: Sequence[Issue]) -> TaskSpecError:
    """Fold every issue into one error: the first one's file and field, all messages joined."""
    if not issues:
        raise ValueError("spec_error needs at least one issue")
    first = issues[0]
    lines = [first.message]
    for issue in issues[1:]:
        where = issue.field or ""
        if issue.path != first.path:
            where = f"{issue.path}: {where}" if where else issue.path
        lines.append(f"{where}: {issue.message}" if where else issue.message)
    message = lines[0]
    if len(lines) > 1:
        message += "".join(f"\n  also {line}" for line in lines[1:])
    return TaskSpecError(path=first.path, field=first.field, message=message)
