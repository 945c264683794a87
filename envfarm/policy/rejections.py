"""How a rejected request is classified: a context too long, the request's own fault, or the
model name unknown (``OpenAIPolicy`` decides with these; the module docstring there says what
each class leads to)."""

from __future__ import annotations

import json
import re

from envfarm.errors import PolicyError, PolicyResponseError, RequestRejected

CONTEXT_LENGTH = re.compile(
    r"context[_ ]length|context size|maximum context|context window|prompt is too long",
    re.IGNORECASE,
)
PARSER_ERROR = re.compile(r"\[json\.exception\.")
"""A 500 whose message comes from the server's JSON parser: the request, not the server."""
MODEL_MISSING = re.compile(
    r"model.*(does not exist|doesn't exist|not found|not exist)|(unknown|no such|invalid) model",
    re.IGNORECASE | re.DOTALL,
)


def is_rejection(exc: PolicyResponseError) -> bool:
    """A rejected request body (4xx, or a 500 from the request parser), not an unusable 200."""
    return exc.status is not None and exc.status != 200


def rejected_twice(exc: PolicyResponseError, first: PolicyResponseError | None) -> PolicyError:
    """``exc`` as raised after ``first`` (the previous attempt's rejection, if any)."""
    if first is None or not is_rejection(exc):
        return exc
    return RequestRejected(
        f"request_rejected: the server rejected the same request twice in a row; last: {exc}",
        status=exc.status,
    )


def error_message(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body.decode("utf-8", errors="replace")
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, dict):
        return " ".join(str(error.get(k, "")) for k in ("message", "detail", "type", "code"))
    return str(error)


def says_context_length(body: bytes) -> bool:
    return bool(CONTEXT_LENGTH.search(error_message(body)))


def parser_error(status: int, body: bytes) -> bool:
    return status == 500 and bool(PARSER_ERROR.search(error_message(body)))


def says_model_missing(body: bytes) -> bool:
    try:
        data = json.loads(body)
    except ValueError:
        return bool(MODEL_MISSING.search(body.decode("utf-8", errors="replace")))
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, dict):
        if error.get("code") == "model_not_found":
            return True
        error = error.get("message", error.get("detail", ""))
    return bool(MODEL_MISSING.search(str(error)))
