"""The encodings a page of groups comes in (docs/api.md, "Compact encodings"), and decoding one.

A trainer asks for plain JSON (groups parsed into ``DeliveredGroup`` models) or for a compact
form read lazily (``LazyGroup``, ``envfarm.client.lazy``): JSON with packed token arrays,
NDJSON (packed or not) or Arrow. A JSON page whose group spans the server named is parsed a
group at a time (``SpannedPage``); a page without them is parsed whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from envfarm.client.chunks import Chunks
from envfarm.client.http import Raw
from envfarm.client.lazy import LazyGroup, arrow_groups, json_group, loads, ndjson_groups
from envfarm.models.jobs import DeliveredGroup, GroupPage

T = TypeVar("T")
JSON, NDJSON = "application/json", "application/x-ndjson"
ARROW, SSE = "application/vnd.apache.arrow.stream", "text/event-stream"
ENCODINGS = {
    "json": JSON,
    "packed": f"{JSON}; arrays=packed",
    "ndjson": NDJSON,
    "ndjson-packed": f"{NDJSON}; arrays=packed",
    "arrow": ARROW,
}


def stream_group(data: bytes) -> DeliveredGroup:
    return DeliveredGroup.model_validate(loads(data))


def decode_models(raw: Raw) -> list[DeliveredGroup] | SpannedPage[DeliveredGroup]:
    """A plain JSON page's groups as models."""
    if raw.spans:
        return SpannedPage(raw.body, raw.spans, stream_group)
    return GroupPage.model_validate(loads(bytes(raw.body))).groups


class SpannedPage(Generic[T]):
    """A JSON page's groups, each parsed from its span of the body when it is read: parsing
    one group at a time keeps the freshly made objects few enough to stay in the CPU's
    caches, which makes it about twice as fast as parsing the whole page (bench/RESULTS.md),
    and a group the consumer has finished with is freed before the next is parsed."""

    def __init__(
        self, body: bytes | Chunks, spans: tuple[tuple[int, int], ...], parse: Callable[[bytes], T]
    ) -> None:
        self._body, self._spans, self._parse = body, spans, parse

    def __len__(self) -> int:
        return len(self._spans)

    def __getitem__(self, index: int) -> T:
        start, end = self._spans[index]
        return self._parse(self._body[start:end])

    def __iter__(self) -> Iterator[T]:
        for index in range(len(self._spans)):
            yield self[index]


def decode_groups(media_type: str, body: bytes | Chunks, spans: tuple[tuple[int, int], ...] = ()
                  ) -> list[LazyGroup] | SpannedPage[LazyGroup]:  # fmt: skip
    """The groups of one answer in the form the server chose."""
    kind = media_type.split(";")[0].strip().lower()
    if kind == JSON and spans:
        return SpannedPage(body, spans, json_group)
    data = bytes(body)
    if kind == ARROW:
        return arrow_groups(data) if data else []
    if kind == NDJSON:
        return list(ndjson_groups(iter(data.split(b"\n"))))
    return [json_group(group) for group in json_group_list(data)]


def decode_lazy(raw: Raw) -> list[LazyGroup] | SpannedPage[LazyGroup]:
    """A page's groups, read lazily, in the form the server chose."""
    return decode_groups(raw.media_type, raw.body, raw.spans)


def json_group_list(body: bytes) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = loads(body)["groups"]
    return groups
