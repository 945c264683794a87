"""Trajectories to files for offline training: JSONL as delivered, or Parquet.

JSONL lines are the trajectories exactly as the API or ``envfarm run`` wrote them.

Parquet has one row per trajectory and one column per trajectory field, under the field's own
name (``docs/trajectory.md``): scalar fields keep their type (``trajectory_id`` string,
``attempt`` int64, ``advantage`` double, ...), and object or list fields (``messages``,
``turns``, ``segments``, ``steps``, ``reward``, ``timings``, ``provenance``, ...)
are JSON text, so ``json.loads`` gives back exactly the delivered object and a field added
to the contract later never breaks the file's schema (unknown fields go, as JSON, to
``extra``). Derived columns make filtering cheap without parsing: ``reward_value``,
``reward_valid``, ``num_turns``, ``stop_reason``, ``policy_version_min``/``max``, and, when
exported from the API, the group's ``cursor``, ``dispatch_version``, ``staleness``, ``stale``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from envfarm.client.client import EnvfarmClient
from envfarm.errors import EnvfarmError
from envfarm.models.jobs import DeliveredGroup

ROW_GROUP_ROWS = 256
SCALARS: dict[str, str] = {
    "schema": "string",
    "trajectory_id": "string",
    "episode_id": "string",
    "job_id": "string",
    "group_id": "string",
    "task_id": "string",
    "attempt": "int64",
    "advantage": "float64",
    "group_zero_variance": "bool_",
    "model": "string",
    "artifacts": "string",
}
NESTED = (
    "messages", "turns", "segments", "steps", "reward", "timings", "policy_versions", "outcome",
    "agent", "error", "provenance", "judge_calls", "samples",
)  # fmt: skip
DERIVED: dict[str, str] = {
    "reward_value": "float64",
    "reward_valid": "bool_",
    "num_turns": "int64",
    "stop_reason": "string",
    "policy_version_min": "string",
    "policy_version_max": "string",
    "cursor": "int64",
    "dispatch_version": "string",
    "staleness": "int64",
    "stale": "bool_",
}


class ExportError(EnvfarmError):
    """The output cannot be written as asked (unknown format, missing pyarrow, bad input)."""


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def parquet_row(trajectory: Mapping[str, Any], group: DeliveredGroup | None) -> dict[str, Any]:
    row: dict[str, Any] = {name: trajectory.get(name) for name in SCALARS}
    row.update({name: _json(trajectory.get(name)) for name in NESTED})
    extra = {k: v for k, v in trajectory.items() if k not in SCALARS and k not in NESTED}
    row["extra"] = _json(extra) if extra else None
    reward = trajectory.get("reward") or {}
    versions = trajectory.get("policy_versions") or {}
    row.update(
        reward_value=reward.get("value"),
        reward_valid=reward.get("valid"),
        num_turns=len(trajectory.get("turns") or []),
        stop_reason=(trajectory.get("outcome") or {}).get("stop_reason"),
        policy_version_min=versions.get("min"),
        policy_version_max=versions.get("max"),
        cursor=group.cursor if group else None,
        dispatch_version=group.dispatch_version if group else None,
        staleness=group.staleness if group else None,
        stale=group.stale if group else None,
    )
    return row


class TrajectoryWriter:
    """``with TrajectoryWriter(path) as out: out.write(trajectory, group)``; the format is
    chosen by the suffix (``.jsonl`` or ``.parquet``). ``count`` trajectories were written.
    The file appears only when the block ends without an error (written aside, then renamed)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.format = path.suffix.lower().lstrip(".")
        if self.format not in ("jsonl", "parquet"):
            raise ExportError(f"{path}: the output must end in .jsonl or .parquet")
        self.count = 0
        self._partial = path.with_name(path.name + ".partial")
        self._rows: list[dict[str, Any]] = []
        self._parquet: Any = None
        self._text: Any = None

    def __enter__(self) -> TrajectoryWriter:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.format == "parquet":
            pa, pq = _pyarrow()
            self._schema = pa.schema(
                [(name, getattr(pa, kind)()) for name, kind in SCALARS.items()]
                + [(name, pa.string()) for name in (*NESTED, "extra")]
                + [(name, getattr(pa, kind)()) for name, kind in DERIVED.items()]
            )
            self._parquet = pq.ParquetWriter(self._partial, self._schema, compression="zstd")
        else:
            self._text = self._partial.open("w", encoding="utf-8")
        return self

    def write(self, trajectory: Mapping[str, Any], group: DeliveredGroup | None = None) -> None:
        if self._text is not None:
            self._text.write(json.dumps(trajectory, ensure_ascii=False) + "\n")
        else:
            self._rows.append(parquet_row(trajectory, group))
            if len(self._rows) >= ROW_GROUP_ROWS:
                self._flush()
        self.count += 1

    def _flush(self) -> None:
        if self._rows:
            pa, _ = _pyarrow()
            self._parquet.write_table(pa.Table.from_pylist(self._rows, schema=self._schema))
            self._rows = []

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._text is not None:
            self._text.close()
        if self._parquet is not None:
            if exc is None:
                self._flush()
            self._parquet.close()
        if exc is None:
            self._partial.replace(self.path)
        else:
            self._partial.unlink(missing_ok=True)


async def export_job(
    client: EnvfarmClient,
    job_id: str,
    out: TrajectoryWriter,
    *,
    after: int = 0,
    follow: bool = False,
) -> int:
    """Write the job's groups after cursor ``after`` (0: all); with ``follow``, wait for more
    until the job has ended. Acknowledges nothing. Returns the number of groups written."""
    written = 0
    if follow:
        async for group in client.groups(job_id, after=after, ack=False):
            for trajectory in group.trajectories:
                out.write(trajectory, group)
            written += 1
        return written
    cursor = after
    while page := (await client.page(job_id, after=cursor)).groups:
        for group in page:
            for trajectory in group.trajectories:
                out.write(trajectory, group)
            cursor = group.cursor
        written += len(page)
    return written


def jsonl_path(source: Path) -> Path:
    """The ``trajectories.jsonl`` that ``source`` (the file or a run directory) names."""
    path = source / "trajectories.jsonl" if source.is_dir() else source
    if not path.is_file():
        raise ExportError(f"{path}: no such file (expected a run directory or its JSONL)")
    return path


def read_jsonl(source: Path) -> Iterator[dict[str, Any]]:
    """Trajectories from a ``trajectories.jsonl`` (or a run directory holding one)."""
    path = jsonl_path(source)
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError as exc:
                raise ExportError(f"{path}:{number}: not JSON ({exc})") from exc
            if not isinstance(item, dict):
                raise ExportError(f"{path}:{number}: expected a trajectory object")
            yield item


def _pyarrow() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ExportError(
            "Parquet output needs pyarrow: pip install 'envfarm[parquet]' (or write .jsonl)"
        ) from exc
    return pa, pq
