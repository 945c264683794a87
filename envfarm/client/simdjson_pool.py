"""This thread's simdjson parsers, reused: a group is read through a parser's proxies.

The JSON forms (packed or not; a page's group, or an NDJSON trajectory line at each read)
are parsed with simdjson when pysimdjson is installed (the ``fast`` extra): it builds no
Python object for what is not read, so a trainer that reads a trajectory's reward and
completion ids pays for those, not for its prompt ids and tool output (half of orjson's cost
for a whole trajectory; bench/RESULTS.md). A group's proxies keep its parser busy, so a
group kept after the next one arrives stays readable: the next group takes another parser from
a small pool of this thread's parsers, and a parser is reused once the group it parsed is gone.
A fresh parser per group would cost twice the parse: its buffers are larger than what the
allocator keeps, so each is mapped from the kernel anew.
"""

from __future__ import annotations

import threading
from typing import Any

try:
    import simdjson

    SIMDJSON = True
except ImportError:  # pragma: no cover - the fallback when pysimdjson is not installed
    SIMDJSON = False

SIMDJSON_ARRAYS: type[simdjson.Array] | tuple[()] = simdjson.Array if SIMDJSON else ()
"""simdjson's array proxy, for ``isinstance`` (nothing is one without simdjson)."""
POOL_SIZE = 8
"""Parsers kept per thread (each keeps buffers for the largest document it parsed); a consumer
holding more groups than this gets throwaway ones."""
_parsers = threading.local()


def parse_pooled(data: bytes) -> Any:
    """``data`` parsed by this thread's first parser that no living proxy holds."""
    pool: list[Any] = _parsers.__dict__.setdefault("pool", [])
    for parser in pool:
        try:
            return parser.parse(data)
        except RuntimeError:  # its last document is still referenced
            continue
    parser = simdjson.Parser()
    if len(pool) < POOL_SIZE:
        pool.append(parser)
    return parser.parse(data)


def plain(value: Any) -> Any:
    """A simdjson value as Python objects (lists, dicts, scalars)."""
    if SIMDJSON and isinstance(value, simdjson.Object):
        return value.as_dict()
    if SIMDJSON and isinstance(value, simdjson.Array):
        return value.as_list()
    return value
