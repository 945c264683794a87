"""A page of delivered groups as an Arrow IPC stream: one row per trajectory, the token arrays
as ``list<list<int32>>`` / ``list<list<float32>>`` columns, the rest as a JSON ``body`` column.

The columns are built from the store's packed copy of each trajectory (envfarm.models.packing):
its arrays are already little-endian int32/float32 bytes, so each column's values buffer is the
decoded base64 strings joined together, and the offsets are their lengths. Turning the JSON
form's decimal ids into Python lists and those into Arrow arrays cost the server about
1.2 ms a trajectory, six times what the client spends reading the stream (bench/RESULTS.md).
"""

from __future__ import annotations

import base64
from array import array
from typing import Any

from envfarm.models.jobs import RawGroupPage
from envfarm.models.packing import ARRAY_FIELDS, FLOAT_ARRAYS, INT_ARRAYS, LITTLE, dumps, loads

HEAD_COLUMNS = ("cursor", "group", "trajectory_id", "episode_id", "reward", "valid", "body")


class _TokenColumn:
    """One token array of every turn of every row: values, turn offsets, turn validity."""

    def __init__(self, code: str) -> None:
        self.code = code
        self.chunks: list[bytes] = []
        self.offsets = [0]
        self.missing: list[bool] = []

    def add(self, value: Any) -> None:
        """A turn's packed array (``encodings.packed_texts`` packs every list), or None."""
        data = base64.b64decode(value) if isinstance(value, str) else b""
        self.chunks.append(data)
        self.offsets.append(self.offsets[-1] + len(data) // 4)
        self.missing.append(value is None)

    def arrow(self, rows: list[int]) -> Any:
        import pyarrow as pa  # the parquet extra; negotiation answered 406 without it

        data = b"".join(self.chunks)
        if not LITTLE:  # pragma: no cover - big-endian hosts
            swapped = array(self.code, data)
            swapped.byteswap()
            data = swapped.tobytes()
        kind = pa.float32() if self.code == "f" else pa.int32()
        values = pa.Array.from_buffers(kind, len(data) // 4, [None, pa.py_buffer(data)])
        turns = pa.ListArray.from_arrays(
            pa.array(self.offsets, pa.int32()), values, mask=pa.array(self.missing, pa.bool_())
        )
        return pa.ListArray.from_arrays(pa.array(rows, pa.int32()), turns)


def page_arrow(page: RawGroupPage, packed: list[list[str]]) -> bytes:
    """``packed``: each group's trajectories in packed form (``encodings.packed_texts``)."""
    import pyarrow as pa

    columns: dict[str, list[Any]] = {name: [] for name in HEAD_COLUMNS}
    tokens = {name: _TokenColumn("f" if name in FLOAT_ARRAYS else "i") for name in ARRAY_FIELDS}
    rows = [0]
    for group, texts in zip(page.groups, packed, strict=True):
        meta = group.meta.model_dump_json()
        for text in texts:
            body: dict[str, Any] = loads(text)
            turns = body.get("turns") or ()
            for name, column in tokens.items():
                for turn in turns:
                    column.add(turn.pop(name, None))
            rows.append(rows[-1] + len(turns))
            reward = body.get("reward") or {}
            columns["cursor"].append(group.cursor)
            columns["group"].append(meta)
            columns["trajectory_id"].append(body.get("trajectory_id"))
            columns["episode_id"].append(body.get("episode_id"))
            columns["reward"].append(reward.get("value"))
            columns["valid"].append(bool(reward.get("valid")))
            columns["body"].append(dumps(body).decode())
    types = {
        "cursor": pa.int64(),
        "group": pa.string(),
        "trajectory_id": pa.string(),
        "episode_id": pa.string(),
        "reward": pa.float64(),
        "valid": pa.bool_(),
        "body": pa.string(),
    }
    fields = [pa.field(name, kind) for name, kind in types.items()]
    fields += [pa.field(name, pa.list_(pa.list_(pa.int32()))) for name in INT_ARRAYS]
    fields += [pa.field(name, pa.list_(pa.list_(pa.float32()))) for name in FLOAT_ARRAYS]
    schema = pa.schema(fields)
    heads = [pa.array(columns[name], types[name]) for name in HEAD_COLUMNS]
    arrays = [tokens[name].arrow(rows) for name in ARRAY_FIELDS]
    batch = pa.record_batch([*heads, *arrays], schema=schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())
