"""An installed agent's raw requests, kept without growing quadratically with turns.

A harness resends its whole conversation with every call (chat ``messages``, the Responses
API's ``input``, Anthropic's ``messages``), and its instructions and tool list too: kept as
sent, a session's requests would grow with the square of its turns. Each request is kept as
the difference from the one before it: of a list, only the items after the prefix it shares
with the previous request's (``_prefix: {key: how many}``); a value equal to the previous
request's is left out and named in ``_same``. ``expand_requests`` gives back the bodies exactly
as sent; a request with neither key is whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

LISTS = ("messages", "input")
REPEATED = ("tools", "instructions", "system", "model")


def compact_request(body: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
    if previous is None:
        return body
    kept = dict(body)
    prefix: dict[str, int] = {}
    for key in LISTS:
        now, before = body.get(key), previous.get(key)
        if isinstance(now, list) and isinstance(before, list):
            shared = _shared_prefix(now, before)
            if shared:
                kept[key], prefix[key] = now[shared:], shared
    same = [
        key for key in REPEATED if key in body and key in previous and body[key] == previous[key]
    ]
    for key in same:
        del kept[key]
    if prefix:
        kept["_prefix"] = prefix
    if same:
        kept["_same"] = same
    return kept


def expand_requests(kept: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request bodies as the agent sent them, from their ``compact_request`` forms."""
    bodies: list[dict[str, Any]] = []
    for item in kept:
        body = {k: v for k, v in item.items() if k not in ("_prefix", "_same")}
        previous = bodies[-1] if bodies else {}
        for key in item.get("_same", []):
            body[key] = previous[key]
        for key, shared in item.get("_prefix", {}).items():
            body[key] = list(previous[key][:shared]) + list(body.get(key, []))
        bodies.append(body)
    return bodies


def _shared_prefix(now: list[Any], before: list[Any]) -> int:
    shared = 0
    for a, b in zip(now, before, strict=False):
        if a != b:
            break
        shared += 1
    return shared
