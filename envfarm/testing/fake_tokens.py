"""The fake model's tokenizer, chat template and numbers (for ``fake_vllm``).

Tokens are the UTF-8 bytes of the rendered text, so anyone can decode them by eye and a
prompt's ids extend the previous prompt and completion exactly when the template does. The
template is append-only by construction: a message renders the same wherever it sits, and
an assistant completion is rendered exactly as the assistant message is in the next prompt::

    <|tools|>[...]<|end|>\\n<|system|>...<|end|>\\n<|user|>...<|end|>\\n<|assistant|>
    ...completion...<|end|>\\n<|tool|>[call_0_0] output<|end|>\\n<|assistant|>

Logprobs and routed experts are deterministic functions of token ids and positions.
"""

from __future__ import annotations

import base64
import json
import struct
from array import array
from collections.abc import Sequence
from typing import Any

END = "<|end|>\n"
GENERATION_PROMPT = "<|assistant|>"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def assistant_body(content: str | None, calls: Sequence[tuple[str, str]]) -> str:
    """What the model "generates" for a message with ``content`` and (name, arguments) calls."""
    rendered = (
        f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"
        for name, arguments in calls
    )
    return (content or "") + "".join(rendered)


def render_message(message: dict[str, Any]) -> str:
    role = str(message.get("role"))
    body = _text(message.get("content"))
    if role == "assistant":
        calls = []
        for call in message.get("tool_calls") or []:
            function = call.get("function", {}) if isinstance(call, dict) else {}
            calls.append((str(function.get("name", "")), str(function.get("arguments", ""))))
        body = assistant_body(body, calls)
    elif role == "tool":
        body = f"[{message.get('tool_call_id', '')}] {body}"
    return f"<|{role}|>{body}{END}"


def render_prompt(messages: Sequence[dict[str, Any]], tools: Sequence[Any] = ()) -> str:
    head = f"<|tools|>{json.dumps(list(tools), sort_keys=True)}{END}" if tools else ""
    return head + "".join(render_message(m) for m in messages) + GENERATION_PROMPT


def tokenize(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def token_text(token: int) -> str:
    return chr(token) if token < 0x80 else f"bytes:\\x{token:02x}"


def logprob(token: int, position: int) -> float:
    return -(((token * 31 + position * 17) % 97) + 1) / 100.0


def routing(tokens: int, layers: int, top_k: int, experts: int = 64) -> list[list[list[int]]]:
    """Routed experts of ``tokens`` positions: ``[tokens][layers][top_k]``."""
    return [
        [[(t * 7 + layer * 3 + k * 11) % experts for k in range(top_k)] for layer in range(layers)]
        for t in range(tokens)
    ]


def int32_bytes(nested: list[list[list[int]]]) -> bytes:
    flat = array("i", (v for plane in nested for row in plane for v in row))
    return flat.tobytes()


def npy_base64(nested: list[list[list[int]]], dtype: str = "<i4") -> str:
    """A base64 ``.npy`` (format 1.0) file of ``nested``, as vLLM sends routed experts."""
    codes = {"<i4": "i", "|u1": "B", "<u2": "H"}
    shape = (len(nested), len(nested[0]) if nested else 0, len(nested[0][0]) if nested else 0)
    flat = array(codes[dtype], (v for plane in nested for row in plane for v in row))
    header = f"{{'descr': '{dtype}', 'fortran_order': False, 'shape': {shape}, }}"
    pad = -(10 + len(header) + 1) % 64
    text = (header + " " * pad + "\n").encode("latin1")
    data = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + flat.tobytes()
    return base64.b64encode(data).decode()
