"""Token arrays as the compact forms carry them, read without a Python number per token.

The packed forms carry each turn's ``prompt_token_ids``, ``prompt_suffix_ids`` and
``completion_token_ids`` as base64 of little-endian int32 and its ``logprobs`` as base64 of
little-endian float32 (docs/api.md, "Compact encodings"); Arrow carries them as list columns of
int32/float32; plain JSON as numbers. Each is read here as a list, or as a typed ``memoryview``
over the numbers' bytes that numpy and torch take without a copy.
"""

from __future__ import annotations

import base64
import sys
from array import array
from collections.abc import Callable
from typing import Any, Literal

from envfarm.client.simdjson_pool import SIMDJSON_ARRAYS

try:
    import pybase64  # SIMD base64: four times the standard library's speed

    b64decode: Callable[[str], bytes] = pybase64.b64decode
except ImportError:  # pragma: no cover - the fallback when pybase64 is not installed
    b64decode = base64.b64decode

INT_ARRAYS = ("prompt_token_ids", "prompt_suffix_ids", "completion_token_ids")
FLOAT_ARRAYS = ("logprobs",)
LITTLE = sys.byteorder == "little"


def packed_code(name: str) -> str:
    """The struct format of the array ``name`` in the packed forms: float32 or int32."""
    return "f" if name in FLOAT_ARRAYS else "i"


def unpack(value: Any, code: str) -> list[Any] | None:
    """A packed array (base64 string) as a list; lists and None pass through."""
    if not isinstance(value, str):
        return value  # type: ignore[no-any-return]
    return unpacked_view(value, code).tolist()


def typed(data: Any, code: str) -> memoryview[Any]:
    """``data``'s bytes as numbers of the struct format ``code`` (``i``, ``f``, ``q``, ``d``)."""
    return memoryview(data).cast(code)  # type: ignore[call-overload,no-any-return]


def unpacked_view(value: str, code: str) -> memoryview[Any]:
    """A packed array (base64 of little-endian int32/float32) as a typed view of its bytes."""
    if LITTLE:
        return typed(b64decode(value), code)
    data = array(code, b64decode(value))
    data.byteswap()
    return memoryview(data)


def json_view_reader(name: str) -> Callable[[Any], memoryview[Any] | None]:
    """What reads one turn's array ``name`` as a typed view: unpacked when packed, else its
    numbers as int64/float64 (copied by simdjson in C when the value is simdjson's, so no Python
    number is made). Made once per read of a trajectory, not per turn: a trainer reads every
    turn of every trajectory."""
    code = packed_code(name)
    wide = "d" if code == "f" else "q"
    of_type: Literal["d", "i"] = "d" if code == "f" else "i"  # simdjson's "i" is int64

    def read(turn: Any) -> memoryview[Any] | None:
        value = turn.get(name)
        if value is None:
            return None
        if isinstance(value, SIMDJSON_ARRAYS):
            return typed(value.as_buffer(of_type=of_type), wide)
        if isinstance(value, str):
            return unpacked_view(value, code)
        return memoryview(array(wide, value))

    return read


def joined_view(first: memoryview[Any], second: memoryview[Any]) -> memoryview[Any]:
    """Two typed views as one (a copy of both), in the first one's format."""
    if first.format != second.format:  # JSON numbers before packed ones: not from one server
        return memoryview(array(first.format, [*first.tolist(), *second.tolist()]))
    return typed(b"".join((first, second)), first.format)


def arrow_views(value: Any, name: str) -> list[memoryview[Any] | None]:
    """A row's list<list<int32/float32>> cell as one typed view per turn, over Arrow's buffer."""
    if not value.is_valid:
        return []
    code = packed_code(name)
    views: list[memoryview[Any] | None] = []
    turns = value.values
    for index in range(len(turns)):
        turn = turns[index]
        if not turn.is_valid:
            views.append(None)
            continue
        numbers = turn.values
        whole = typed(numbers.buffers()[1], code)
        views.append(whole[numbers.offset : numbers.offset + len(numbers)])
    return views
