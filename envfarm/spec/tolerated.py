"""What Harbor's parser lets pass and envfarm takes out before validating: unknown keys, mostly.

Harbor's task models ignore keys they do not know, so public tasks carry many (``[task].category``,
a root ``[tags]`` table, ``[solution].timeout_sec``, ``agent.timeout``...). envfarm's models stay
``extra="forbid"`` so that its own code never reads a key by accident; instead the keys no model
declares are taken out of the parsed TOML here, before validation, into a record of their own
(``Task.unknown``, dotted key -> value), and each one becomes a warning that ``envfarm run``
prints and ``envfarm check`` lists as a lint finding. ``[metadata]`` is the author's free table
and is never looked into, and neither are the ``env`` tables.

A few known keys are also taken out when their value cannot mean what envfarm reads them as:
a ``[task].name`` that cannot be an id (the task is then known by its directory name, as it is
without a name) and an ``[environment].runtime`` that is not a string (envfarm's extension names a
sandbox runtime; other tools use the key for other things).
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from typing import Any

from pydantic import BaseModel

_TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
_OPAQUE_FIELDS = frozenset({"metadata", "env"})
"""Tables whose keys are the author's, never envfarm's fields."""


def valid_task_name(name: object) -> bool:
    return isinstance(name, str) and bool(_TASK_NAME.fullmatch(name)) and ".." not in name


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list):
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return []


def _where(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def take_unknown(table: dict[str, Any], model: type[BaseModel], prefix: str = "") -> dict[str, Any]:
    """Remove from ``table`` (in place) every key ``model`` does not declare, at any depth;
    return them as dotted key -> value."""
    unknown: dict[str, Any] = {}
    fields = model.model_fields
    for key in list(table):
        where = _where(prefix, str(key))
        if key not in fields:
            unknown[where] = table.pop(key)
            continue
        if key in _OPAQUE_FIELDS:
            continue
        nested = _models_in(fields[key].annotation)
        if not nested:
            continue
        value = table[key]
        if isinstance(value, dict):
            unknown |= take_unknown(value, nested[0], where)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, dict):
                    unknown |= take_unknown(item, nested[0], f"{where}[{index}]")
    return unknown


def take_misread(data: dict[str, Any]) -> dict[str, Any]:
    """Known keys whose value means something else than envfarm reads: taken out (see above)."""
    taken: dict[str, Any] = {}
    task = data.get("task")
    if isinstance(task, dict) and "name" in task and not valid_task_name(task["name"]):
        taken["task.name"] = task.pop("name")
    env = data.get("environment")
    if isinstance(env, dict) and "runtime" in env and not isinstance(env["runtime"], str):
        taken["environment.runtime"] = env.pop("runtime")
    return taken


def unknown_message(where: str, model: type[BaseModel]) -> str:
    """The warning for one ignored key, with the closest declared field when there is one."""
    if where == "task.name":
        return (
            "not usable as a task id ('name' or 'org/name' of letters, digits, '.', '_' and "
            "'-'); ignored: the task is known by its directory name"
        )
    if where == "environment.runtime":
        return "ignored: envfarm's runtime names a sandbox runtime ('gvisor'), not a table"
    parent, _, key = where.rpartition(".")
    table = _table_model(model, parent)
    hint = ""
    if table is not None:
        close = difflib.get_close_matches(re.sub(r"\[\d+\]$", "", key), table.model_fields, 1, 0.8)
        hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown field, ignored (as Harbor does){hint}"


def _table_model(root: type[BaseModel], dotted: str) -> type[BaseModel] | None:
    model: type[BaseModel] = root
    for part in filter(None, re.sub(r"\[\d+\]", "", dotted).split(".")):
        field = model.model_fields.get(part)
        found = _models_in(field.annotation) if field is not None else []
        if not found:
            return None
        model = found[0]
    return model
