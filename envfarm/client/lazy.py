"""Delivered groups decoded lazily from the compact forms (docs/api.md, "Compact encodings").

A ``LazyGroup`` carries its metadata; each ``LazyTrajectory`` knows its id, episode and reward
from the group's heads (NDJSON) or its row (Arrow) and keeps the rest as bytes until asked: a
trainer that reads only token ids and rewards never parses messages or tool output. Packed
token arrays (base64 of little-endian int32/float32) are unpacked only when a turn's ids are
read. This module is standalone: it imports nothing of envfarm beyond the models and its
neighbours in ``envfarm.client``.

simdjson reads the JSON forms when it is installed, from a pool of this thread's parsers
(``envfarm.client.simdjson_pool``); the token arrays are read by ``envfarm.client.token_arrays``.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from envfarm.client.simdjson_pool import SIMDJSON, parse_pooled, plain
from envfarm.client.token_arrays import (
    FLOAT_ARRAYS,
    INT_ARRAYS,
    arrow_views,
    joined_view,
    json_view_reader,
    packed_code,
    unpack,
)
from envfarm.models.jobs import GroupMeta
from envfarm.models.token_layout import whole_prompts

try:
    import orjson

    loads: Callable[[str | bytes], Any] = orjson.loads
except ImportError:  # pragma: no cover - the fallback when orjson is not installed
    loads = json.loads

HEAD_KEYS = ("trajectory_id", "episode_id", "reward")
"""What a ``LazyTrajectory`` knows without parsing its body."""
T = TypeVar("T")


COMPACT_SOURCES = ("prompt_suffix_ids", "completion_token_ids")
"""What a turn's full prompt is rebuilt from in the compact layout (with the turn before)."""


@dataclass
class LazyTrajectory:
    """One trajectory: ``trajectory_id``, ``episode_id``, ``reward`` at no parse cost;
    ``token_arrays(name)`` per turn as lists, ``token_buffers(name)`` per turn as typed views;
    ``to_dict()`` the whole object (token arrays as lists)."""

    head: dict[str, Any]
    _raw: bytes | None = None
    _columns: dict[str, Any] | None = None
    """Arrow only: each token column's value for this row (converted when read)."""
    _parsed: dict[str, Any] | None = field(default=None, repr=False)
    _doc: Any = field(default=None, repr=False)
    """simdjson only: the trajectory's object in its group's document, read when asked."""
    _read: dict[str, list[Any]] = field(default_factory=dict, repr=False)
    """Each token array read so far, per turn (unpacked)."""

    @property
    def trajectory_id(self) -> str:
        return str(self.head["trajectory_id"])

    @property
    def episode_id(self) -> str:
        return str(self.head["episode_id"])

    @property
    def reward(self) -> dict[str, Any]:
        return self.head.get("reward") or {}

    def token_arrays(self, name: str) -> list[list[Any] | None]:
        """Each turn's ``prompt_token_ids``, ``completion_token_ids``, ``logprobs``, ...
        (only this array is unpacked; a full prompt is rebuilt from the compact layout)."""
        if name not in self._read:
            arrays = self._arrays(name)
            if name == "prompt_token_ids":
                suffixes, completions = (self.token_arrays(n) for n in COMPACT_SOURCES)
                arrays = whole_prompts(arrays, suffixes, completions, operator.add)
            self._read[name] = arrays
        return self._read[name]

    def token_buffers(self, name: str) -> list[memoryview[Any] | None]:
        """Each turn's array as a typed ``memoryview`` of its numbers, made without a Python
        number per token: int32/float32 (format ``i``/``f``) from the packed forms and Arrow,
        int64/float64 (``q``/``d``) from plain JSON numbers. ``numpy.asarray(view)`` and
        ``torch.asarray(view)`` read it without a copy; ``view.tolist()`` gives the list."""
        if self._columns is not None and name in self._columns:
            views = arrow_views(self._columns[name], name)
        else:
            views = self._per_turn(json_view_reader(name))
        if name != "prompt_token_ids":
            return views
        suffixes, completions = (self.token_buffers(n) for n in COMPACT_SOURCES)
        return whole_prompts(views, suffixes, completions, joined_view)

    def _arrays(self, name: str) -> list[Any]:
        if self._columns is not None and name in self._columns:
            return self._columns[name].as_py()  # type: ignore[no-any-return]
        code = packed_code(name)
        return self._per_turn(lambda turn: unpack(plain(turn.get(name)), code))

    def _per_turn(self, read: Callable[[Any], T]) -> list[T]:
        """``read`` of each turn: of the group's simdjson object, of an NDJSON line parsed by
        simdjson for this read alone (what ``read`` returns is a copy, so the parser goes back
        to the pool at once, while a page's other lines wait their turn), or of the parsed
        body."""
        if self._parsed is None and self._doc is None and self._raw is not None and SIMDJSON:
            source = parse_pooled(self._raw)
        elif self._parsed is None and self._doc is not None:
            source = self._doc
        else:
            source = self._body()
        return [read(turn) for turn in source.get("turns") or ()]

    def _body(self) -> dict[str, Any]:
        if self._parsed is None:
            self._parsed = (
                self._doc.as_dict() if self._doc is not None else loads(self._raw or b"{}")
            )
        return self._parsed

    def to_dict(self) -> dict[str, Any]:
        """The trajectory as the JSON form has it: token arrays as lists, every prompt whole."""
        body = self._body()
        for name in (*INT_ARRAYS, *FLOAT_ARRAYS):
            for turn, value in zip(body.get("turns") or (), self.token_arrays(name), strict=False):
                turn[name] = value
        for turn in body.get("turns") or ():
            if turn.get("prompt_token_ids") is not None:
                turn["prompt_suffix_ids"] = None
        return body


@dataclass
class LazyGroup:
    meta: GroupMeta
    trajectories: list[LazyTrajectory]

    @property
    def cursor(self) -> int:
        return self.meta.cursor


def ndjson_groups(lines: Iterator[bytes]) -> Iterator[LazyGroup]:
    """Groups from NDJSON lines: a group line with ``heads``, then one line per trajectory."""
    for line in lines:
        if not line.strip():
            continue
        head = loads(line)
        heads = head.pop("heads")
        trajectories = [LazyTrajectory(h, next(lines)) for h in heads]
        yield LazyGroup(GroupMeta.model_validate(head), trajectories)


def json_group(data: bytes | dict[str, Any]) -> LazyGroup:
    """A group in the JSON form (packed or not): read lazily with simdjson when installed,
    else parsed at once."""
    if SIMDJSON and isinstance(data, bytes):
        return simdjson_group(data)
    return parsed_group(loads(data) if isinstance(data, bytes | str) else data)


def simdjson_group(data: bytes) -> LazyGroup:
    """A group read through simdjson's proxies: only what is read becomes Python objects."""
    doc = parse_pooled(data)
    trajectories = []
    for body in doc.get("trajectories") or ():
        head = {key: plain(body.get(key)) for key in HEAD_KEYS}
        trajectories.append(LazyTrajectory(head, _doc=body))
    meta = {key: plain(doc[key]) for key in doc.keys() if key != "trajectories"}  # noqa: SIM118
    return LazyGroup(GroupMeta.model_validate(meta), trajectories)


def parsed_group(head: dict[str, Any]) -> LazyGroup:
    """A group already parsed into Python objects (token arrays unpacked when read)."""
    bodies = head.pop("trajectories")
    trajectories = []
    for body in bodies:
        lazy = LazyTrajectory({key: body.get(key) for key in HEAD_KEYS})
        lazy._parsed = body
        trajectories.append(lazy)
    return LazyGroup(GroupMeta.model_validate(head), trajectories)


def arrow_groups(data: bytes) -> list[LazyGroup]:
    """Groups from an Arrow IPC stream (one row per trajectory); needs pyarrow."""
    import pyarrow as pa

    table = pa.ipc.open_stream(data).read_all()
    names = [*INT_ARRAYS, *FLOAT_ARRAYS]
    columns = {name: table.column(name) for name in names}
    rows = table.select(["cursor", "group", "trajectory_id", "episode_id", "reward", "valid"])
    bodies = table.column("body")
    groups: list[LazyGroup] = []
    for index, row in enumerate(rows.to_pylist()):
        if not groups or groups[-1].cursor != row["cursor"]:
            groups.append(LazyGroup(GroupMeta.model_validate_json(row["group"]), []))
        head = {
            "trajectory_id": row["trajectory_id"],
            "episode_id": row["episode_id"],
            "reward": {"value": row["reward"], "valid": row["valid"]},
        }
        own = {name: columns[name][index] for name in names}
        raw = bodies[index].as_py().encode()
        groups[-1].trajectories.append(LazyTrajectory(head, raw, own))
    return groups
