"""Content negotiation for delivered groups: the JSON form by default, compact forms on request.

The store keeps each trajectory as JSON text; the default answer forwards it untouched. A
trainer that asks for a compact form gets the same objects in less space and less parse time:

- ``application/json; arrays=packed`` (also on ``application/x-ndjson`` and
  ``text/event-stream``): the per-turn token arrays (``prompt_token_ids``,
  ``prompt_suffix_ids``, ``completion_token_ids``) are base64 strings of little-endian int32,
  ``logprobs`` of little-endian float32.
- ``application/x-ndjson``: one line per group (its metadata, the trajectories' heads: id,
  episode and reward), then one line per trajectory, so a reader can skip bodies it never opens.
- ``application/vnd.apache.arrow.stream``: an Arrow IPC stream, one row per trajectory with
  the token arrays as list columns and the rest of the trajectory as a JSON ``body`` column
  (needs pyarrow, the ``parquet`` extra; 406 without it).

Anything else in ``Accept`` is a 406. The answer is compressed by ``Accept-Encoding``: gzip,
or zstd when the ``zstandard`` package is installed. docs/api.md names the media types.
"""

from __future__ import annotations

import importlib.util
import zlib
from dataclasses import dataclass
from typing import Any

from envfarm.api.arrow_page import page_arrow
from envfarm.api.problems import ProblemError, problem
from envfarm.models.jobs import RawGroup, RawGroupPage
from envfarm.models.packing import dumps, loads, packed_text

JSON = "application/json"
NDJSON = "application/x-ndjson"
ARROW = "application/vnd.apache.arrow.stream"
SSE = "text/event-stream"
HAVE_ARROW = importlib.util.find_spec("pyarrow") is not None
HAVE_ZSTD = importlib.util.find_spec("zstandard") is not None


@dataclass(frozen=True)
class Encoding:
    media_type: str
    packed: bool = False

    @property
    def content_type(self) -> str:
        return f"{self.media_type}; arrays=packed" if self.packed else self.media_type


def negotiate(accept: str | None) -> Encoding:
    """The first acceptable form in ``Accept`` (by q, then order); 406 when none is."""
    if not accept or not accept.strip():
        return Encoding(JSON)
    offers: list[tuple[float, int, str, dict[str, str]]] = []
    for position, part in enumerate(accept.split(",")):
        kind, *raw_params = (piece.strip() for piece in part.split(";"))
        params = dict(p.partition("=")[::2] for p in raw_params if "=" in p)
        try:
            q = float(params.pop("q", "1"))
        except ValueError:
            q = 0.0
        if q > 0:
            offers.append((-q, position, kind.lower(), params))
    for _, _, kind, params in sorted(offers):
        packed = params.get("arrays", "").lower() == "packed"
        if kind in ("*/*", "application/*", JSON):
            return Encoding(JSON, packed)
        if kind in (NDJSON, SSE):
            return Encoding(kind, packed)
        if kind == ARROW:
            if not HAVE_ARROW:
                raise not_acceptable(f"{ARROW} needs pyarrow on the server (the parquet extra)")
            return Encoding(ARROW)
    raise not_acceptable(f"none of {accept!r} is offered")


def not_acceptable(detail: str) -> ProblemError:
    offered = f"{JSON}, {JSON}; arrays=packed, {NDJSON}, {SSE}" + (
        f", {ARROW}" if HAVE_ARROW else ""
    )
    return ProblemError(problem(406, "not-acceptable", f"{detail}; offered: {offered}"))


def packed_texts(group: RawGroup) -> list[str]:
    """The group's trajectories in packed form: the store's copies, packed here when absent
    (groups completed before the store kept them)."""
    stored = group.packed or [None] * len(group.trajectories)
    return [p if p is not None else packed_text(t)
            for t, p in zip(group.trajectories, stored, strict=True)]  # fmt: skip


def group_parts(group: RawGroup, packed: bool) -> list[bytes]:
    """The group's ``DeliveredGroup`` JSON in pieces, joined once by the caller: a page is
    megabytes, and each join or encode of the whole is a copy of it."""
    texts = packed_texts(group) if packed else group.trajectories
    parts = [group.meta.model_dump_json()[:-1].encode() + b',"trajectories":[']
    for index, text in enumerate(texts):
        if index:
            parts.append(b",")
        parts.append(text.encode())
    parts.append(b"]}")
    return parts


def page_json(page: RawGroupPage, packed: bool) -> bytes:
    return page_json_spans(page, packed)[0]


def page_json_spans(page: RawGroupPage, packed: bool) -> tuple[bytes, list[tuple[int, int]]]:
    """The page as ``GroupPage`` JSON, and where each group's object lies in it (start, end):
    a client parses one group at a time, which costs it half as much as one large parse."""
    chunks, spans = page_json_chunks(page, packed)
    return b"".join(chunks), spans


def page_json_chunks(page: RawGroupPage, packed: bool) -> tuple[list[bytes], list[tuple[int, int]]]:
    """``page_json_spans`` as one chunk per group (each led by the page's head or a comma),
    then the page's tail, for an answer written a group at a time."""
    chunks, spans, at = [], [], 0
    for index, group in enumerate(page.groups):
        lead = b"," if index else b'{"groups":['
        chunks.append(b"".join([lead, *group_parts(group, packed)]))
        spans.append((at + len(lead), at + len(chunks[-1])))
        at += len(chunks[-1])
    tail = b'],"next_cursor":' + dumps(page.next_cursor) + b"}"
    chunks.append(tail if chunks else b'{"groups":[' + tail)
    return chunks, spans


def spans_header(spans: list[tuple[int, int]]) -> str:
    """``Envfarm-Group-Spans``: each group's ``start-end`` byte offsets in the (uncompressed)
    JSON body, comma-separated."""
    return ",".join(f"{start}-{end}" for start, end in spans)


def head_of(trajectory: dict[str, Any]) -> dict[str, Any]:
    keys = ("trajectory_id", "episode_id", "attempt", "reward")
    return {key: trajectory.get(key) for key in keys}


def group_ndjson(group: RawGroup, packed: bool) -> bytes:
    texts = packed_texts(group) if packed else group.trajectories
    head = group.meta.model_dump(mode="json")
    head["heads"] = [head_of(loads(text)) for text in texts]  # packed text parses fast
    lines = [dumps(head), *(text.encode() for text in texts)]
    return b"\n".join(lines) + b"\n"


def page_ndjson(page: RawGroupPage, packed: bool) -> bytes:
    return b"".join(group_ndjson(group, packed) for group in page.groups)


def encode_page(page: RawGroupPage, encoding: Encoding) -> bytes:
    if encoding.media_type == ARROW:
        return page_arrow(page, [packed_texts(group) for group in page.groups])
    if encoding.media_type == NDJSON:
        return page_ndjson(page, encoding.packed)
    return page_json(page, encoding.packed)


class Compressor:
    """Streaming compression chosen by ``Accept-Encoding`` (none when nothing matches)."""

    def __init__(self, accept_encoding: str | None) -> None:
        offered = {p.split(";")[0].strip().lower() for p in (accept_encoding or "").split(",")}
        self.name: str | None = None
        self._zstd: Any = None
        self._gzip: Any = None
        if "zstd" in offered and HAVE_ZSTD:
            import zstandard

            self.name = "zstd"
            self._zstd = zstandard.ZstdCompressor(level=1).compressobj()
        elif "gzip" in offered:
            self.name = "gzip"
            self._gzip = zlib.compressobj(1, zlib.DEFLATED, 31)

    def chunk(self, data: bytes) -> bytes:
        """Compressed ``data``, flushed so the reader can decode it at once (for streams)."""
        if self._zstd is not None:
            import zstandard

            return bytes(
                self._zstd.compress(data) + self._zstd.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
            )
        if self._gzip is not None:
            return bytes(self._gzip.compress(data) + self._gzip.flush(zlib.Z_SYNC_FLUSH))
        return data

    def end(self) -> bytes:
        if self._zstd is not None:
            return bytes(self._zstd.flush())
        if self._gzip is not None:
            return bytes(self._gzip.flush())
        return b""

    def whole(self, data: bytes) -> bytes:
        if self.name is None:
            return data
        return self.chunk(data) + self.end()
