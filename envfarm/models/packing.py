"""The packed layout of a trajectory's token arrays (docs/api.md, "Compact encodings").

The packed form is the compact token layout (``envfarm.models.token_layout``: a turn whose prompt
extends the previous turn's prompt and completion keeps only ``prompt_suffix_ids``) with each
turn's ``prompt_token_ids``, ``prompt_suffix_ids`` and ``completion_token_ids`` as base64 strings
of little-endian int32 and ``logprobs`` of little-endian float32; everything else is as in the
JSON form. An agent's prompts are append-only, so the full layout grows with the square of the
turns and the compact one linearly. The store keeps a packed copy of each delivered trajectory,
made once when its group completes, so a compact answer is concatenated like the JSON one rather
than re-encoded per request (turning decimal token ids into binary is the expensive part).
"""

from __future__ import annotations

import base64
import json
import sys
from array import array
from collections.abc import Callable
from typing import Any

from envfarm.models.token_layout import extends

try:
    import orjson

    loads: Callable[[str | bytes], Any] = orjson.loads

    def dumps(value: Any) -> bytes:
        return orjson.dumps(value)

except ImportError:  # pragma: no cover - the fallback when orjson is not installed
    loads = json.loads

    def dumps(value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode()


INT_ARRAYS = ("prompt_token_ids", "prompt_suffix_ids", "completion_token_ids")
FLOAT_ARRAYS = ("logprobs",)
ARRAY_FIELDS = INT_ARRAYS + FLOAT_ARRAYS
LITTLE = sys.byteorder == "little"


def pack(values: list[Any], code: str) -> str:
    data = array(code, values)
    if not LITTLE:  # pragma: no cover - big-endian hosts
        data.byteswap()
    return base64.b64encode(data.tobytes()).decode()


def compact_turns(turns: list[dict[str, Any]]) -> None:
    """Parsed turns put in the compact layout in place: a turn whose prompt extends the turn
    before's prompt and completion keeps only ``prompt_suffix_ids`` (the rule of
    ``samples.PromptCompactor``, on JSON rather than models). Turns already compact stay so."""
    context: list[Any] | None = None
    for turn in turns:
        prompt = turn.get("prompt_token_ids")
        suffix = turn.get("prompt_suffix_ids")
        if prompt is None:
            prompt = None if suffix is None or context is None else context + suffix
        elif context and extends(prompt, context):
            turn["prompt_suffix_ids"], turn["prompt_token_ids"] = prompt[len(context) :], None
        completion = turn.get("completion_token_ids")
        context = None if prompt is None or completion is None else prompt + completion


def packed_trajectory(text: str | bytes) -> dict[str, Any]:
    """A trajectory's JSON text (either layout), parsed, in the compact layout with its token
    arrays packed."""
    trajectory: dict[str, Any] = loads(text)
    compact_turns(trajectory.get("turns") or [])
    for turn in trajectory.get("turns") or ():
        for name in ARRAY_FIELDS:
            value = turn.get(name)
            if isinstance(value, list):
                turn[name] = pack(value, "f" if name in FLOAT_ARRAYS else "i")
    return trajectory


def packed_text(text: str | bytes) -> str:
    """The packed form of a trajectory's JSON text, as JSON text."""
    return dumps(packed_trajectory(text)).decode()
