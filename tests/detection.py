"""What a server whose profile probe answers late must have seen (``FakeEngine.timeline``):
the whole probe answered before the first chat request, and every chat request carrying the
fields of the profile the probe settled."""

from __future__ import annotations

from typing import Any

from envfarm.policy.profiles import (
    LLAMACPP_FIELDS,
    SGLANG_FIELDS,
    SGLANG_ROUTED_FIELDS,
    VLLM_FIELDS,
    request_fields,
)
from envfarm.testing.fake_engine import PROBE_PATHS, EngineDialect, FakeEngine

CAPTURE_KEYS = {**VLLM_FIELDS, **SGLANG_FIELDS, **SGLANG_ROUTED_FIELDS, **LLAMACPP_FIELDS}
ANSWERS = {"llamacpp": "/props", "sglang": "/get_server_info", "vllm": "/version"}
"""The probe path each server answers as itself; ``openai`` answers none."""
CHAT = "POST /v1/chat/completions"


def probe_paths(dialect: EngineDialect) -> list[str]:
    """The paths the probe asks, in order, up to the one the server answers as itself."""
    if dialect not in ANSWERS:
        return list(PROBE_PATHS)
    return list(PROBE_PATHS[: PROBE_PATHS.index(ANSWERS[dialect]) + 1])


def expected_fields(dialect: EngineDialect) -> dict[str, Any]:
    """The capture fields every request carries once the probe has settled: the profile's own,
    or, after a probe nothing answered, the fallback (detection from the first answer)."""
    return request_fields(dialect if dialect in ANSWERS else "auto")


def assert_settled_before_any_request(engine: FakeEngine, dialect: EngineDialect) -> None:
    bodies = [body for path, body in engine.requests if path == "/v1/chat/completions"]
    assert bodies
    for body in bodies:
        assert {k: body[k] for k in CAPTURE_KEYS if k in body} == expected_fields(dialect)
    timeline = engine.timeline
    first = timeline.index(CHAT)
    answered = {e.removeprefix("answered GET ") for e in timeline[:first] if "answered" in e}
    assert answered == set(probe_paths(dialect)), timeline
