"""An installed agent's raw requests are kept as differences, and given back exactly."""

from __future__ import annotations

import json
from typing import Any

from envfarm.agent.capture.requests import compact_request, expand_requests

TOOLS = [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]


def codex_like(turns: int) -> list[dict[str, Any]]:
    """Requests as Codex sends them: the whole history, instructions and tools every time."""
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": "go " * 50}]
    bodies = []
    for turn in range(turns):
        bodies.append(
            {"model": "policy", "instructions": "x" * 2000, "tools": TOOLS, "input": list(items)}
        )
        items += [
            {"type": "function_call", "call_id": f"c{turn}", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{turn}", "output": "y" * 500},
        ]
    return bodies


def kept(bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out, previous = [], None
    for body in bodies:
        out.append(compact_request(body, previous))
        previous = body
    return out


def test_requests_round_trip_and_grow_linearly() -> None:
    bodies = codex_like(40)
    compact = kept(bodies)
    assert expand_requests(compact) == bodies
    assert compact[0] == bodies[0]
    assert compact[1]["_prefix"] == {"input": 1}
    assert set(compact[1]["_same"]) == {"model", "instructions", "tools"}
    assert len(compact[1]["input"]) == 2
    sizes = [len(json.dumps(c)) for c in compact[1:]]
    assert max(sizes) - min(sizes) < 10  # each later request costs the same, whatever its turn
    assert len(json.dumps(compact)) * 10 < len(json.dumps(bodies))


def test_a_request_that_rewrites_its_history_is_kept_whole_where_it_differs() -> None:
    first = {"model": "m", "messages": [{"role": "user", "content": "a"}], "tools": TOOLS}
    summarized = {"model": "m", "messages": [{"role": "user", "content": "summary"}]}
    then = {"model": "n", "messages": [*summarized["messages"], {"role": "user", "content": "b"}]}
    compact = kept([first, summarized, then, {"unparsable": True}])
    assert "_prefix" not in compact[1]
    assert compact[1]["messages"] == summarized["messages"]
    assert compact[2]["_prefix"] == {"messages": 1}
    assert "_same" not in compact[2]  # the model changed
    assert expand_requests(compact) == [first, summarized, then, {"unparsable": True}]
