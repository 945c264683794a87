"""Reading SWE-bench-style records: a JSON array, JSON lines, or a split of a Parquet file.

Each record is returned with where it came from (``file:line`` for JSON, ``file:row N`` for
Parquet), so that every error names the file, the line and the ``instance_id``. A record that
cannot be used is an error of its own; the others are still returned. SWE-bench's published
files hold ``FAIL_TO_PASS``/``PASS_TO_PASS`` as JSON text of a list: both forms are read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from envfarm.errors import TaskSpecError

DATASET_SUFFIXES = (".json", ".jsonl", ".parquet")


class SweRecord(BaseModel):
    """The fields envfarm reads of one instance; any other field is ignored."""

    model_config = ConfigDict(extra="ignore")

    instance_id: str = Field(min_length=1)
    repo: str = Field(min_length=1)
    base_commit: str = Field(min_length=1)
    problem_statement: str = Field(min_length=1)
    patch: str = Field(min_length=1)
    test_patch: str = Field(min_length=1)
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str] = Field(default_factory=list)
    version: str | None = None
    environment_setup_commit: str | None = None
    image_name: str | None = None
    """The instance image, when the record names it (SWE-Gym, SWE-smith, R2E-Gym...)."""
    test_cmd: str | None = None
    log_parser: str | None = None

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _json_text_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"expected a list of test ids or its JSON text: {exc}") from exc
        return value

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        return (
            str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
        )

    @field_validator("image_name", mode="before")
    @classmethod
    def _image_alias(cls, value: Any) -> Any:
        return value or None


@dataclass(frozen=True)
class LocatedRecord:
    record: SweRecord
    where: str
    """``file:line`` (or ``file:row N``)."""


def split_selector(text: str) -> tuple[Path, str | None]:
    """``data.parquet:test`` -> (data.parquet, "test"); other paths have no split."""
    head, sep, split = text.rpartition(":")
    if sep and head.endswith(".parquet") and split and "/" not in split:
        return Path(head), split
    return Path(text), None


def _json_items(path: Path, text: str) -> list[tuple[int, Any]]:
    """(line, value) of each record: each line of JSONL, each element of a JSON array."""
    stripped = text.lstrip()
    if path.suffix == ".json" and stripped.startswith("["):
        decoder = json.JSONDecoder()
        items: list[tuple[int, Any]] = []
        position = text.index("[") + 1
        while True:
            while position < len(text) and text[position] in " \t\r\n,":
                position += 1
            if position >= len(text) or text[position] == "]":
                return items
            line = text.count("\n", 0, position) + 1
            try:
                value, position = decoder.raw_decode(text, position)
            except json.JSONDecodeError as exc:
                raise TaskSpecError(f"{path}:{exc.lineno}", f"invalid JSON: {exc.msg}") from exc
            items.append((line, value))
    items = []
    for number, line_text in enumerate(text.splitlines(), start=1):
        if line_text.strip():
            try:
                items.append((number, json.loads(line_text)))
            except json.JSONDecodeError as exc:
                items.append((number, exc))
    return items


def _parquet_rows(path: Path, split: str | None) -> list[tuple[int, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise TaskSpecError(
            str(path), "reading Parquet needs pyarrow: pip install 'envfarm[parquet]'"
        ) from exc
    try:
        rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow's errors have no common base
        raise TaskSpecError(str(path), f"cannot read as Parquet: {exc}") from exc
    if split is not None:
        if rows and "split" not in rows[0]:
            raise TaskSpecError(
                f"{path}:{split}", "the file has no 'split' column to select the split from"
            )
        rows = [row for row in rows if row.get("split") == split]
        if not rows:
            raise TaskSpecError(f"{path}:{split}", f"no record of split {split!r}")
    return list(enumerate(rows, start=1))


def _record_error(where: str, value: Any, exc: ValidationError) -> TaskSpecError:
    instance = value.get("instance_id") if isinstance(value, dict) else None
    problems = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"]) or "record"
        problem = "missing" if error["type"] == "missing" else error["msg"]
        problems.append(f"{field}: {problem}")
    label = (
        f"instance {instance!r}" if isinstance(instance, str) else "a record without instance_id"
    )
    return TaskSpecError(where, f"{label}: {'; '.join(problems)}")


def read_records(selector: str) -> tuple[list[LocatedRecord], list[TaskSpecError]]:
    """Every usable record of the dataset, and an error for each one that is not."""
    path, split = split_selector(selector)
    if not path.is_file():
        return [], [
            TaskSpecError(str(path), "does not exist" if not path.exists() else "is not a file")
        ]
    row_word = ""
    try:
        if path.suffix == ".parquet":
            items, row_word = _parquet_rows(path, split), "row "
        else:
            items = _json_items(path, path.read_text(encoding="utf-8"))
    except TaskSpecError as exc:
        return [], [exc]
    except (OSError, UnicodeDecodeError) as exc:
        return [], [TaskSpecError(str(path), f"cannot read: {exc}")]
    records: list[LocatedRecord] = []
    errors: list[TaskSpecError] = []
    seen: dict[str, str] = {}
    for number, value in items:
        where = f"{path}:{row_word}{number}"
        if isinstance(value, json.JSONDecodeError):
            errors.append(TaskSpecError(where, f"invalid JSON: {value.msg}"))
            continue
        if not isinstance(value, dict):
            errors.append(
                TaskSpecError(where, f"expected a JSON object, got {type(value).__name__}")
            )
            continue
        try:
            record = SweRecord.model_validate(value)
        except ValidationError as exc:
            errors.append(_record_error(where, value, exc))
            continue
        if record.instance_id in seen:
            errors.append(
                TaskSpecError(
                    where,
                    f"instance {record.instance_id!r}: duplicate instance_id, first at "
                    f"{seen[record.instance_id]}",
                )
            )
            continue
        seen[record.instance_id] = where
        records.append(LocatedRecord(record, where))
    if not records and not errors:
        errors.append(TaskSpecError(str(path), "holds no record"))
    return records, errors
