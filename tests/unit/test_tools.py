import json

import pytest

from envfarm.agent.tools import (
    BashArgs,
    EditFileArgs,
    SubmitArgs,
    parse_arguments,
    tool_schemas,
    truncate,
)
from envfarm.policy.base import ToolCallRaw


def _call(name: str, arguments: str) -> ToolCallRaw:
    return ToolCallRaw(id="c1", name=name, arguments=arguments)


def test_schemas_name_every_tool_with_required_arguments() -> None:
    schemas = {s["function"]["name"]: s["function"] for s in tool_schemas()}
    assert set(schemas) == {"bash", "read_file", "write_file", "edit_file", "submit"}
    assert schemas["bash"]["parameters"]["required"] == ["command"]
    assert schemas["submit"]["parameters"]["properties"] == {}
    assert json.dumps(schemas)  # serialisable for the request body


def test_valid_calls_parse() -> None:
    assert parse_arguments(_call("bash", '{"command": "ls"}')) == BashArgs(command="ls")
    assert parse_arguments(_call("submit", "{}")) == SubmitArgs()
    assert parse_arguments(_call("submit", "")) == SubmitArgs()
    edit = parse_arguments(_call("edit_file", '{"path": "a", "old": "x", "new": "y"}'))
    assert edit == EditFileArgs(path="a", old="x", new="y")


@pytest.mark.parametrize(
    ("name", "arguments", "needle"),
    [
        ("bash", '{"command": ', "not valid JSON"),
        ("bash", "[]", "must be a JSON object"),
        ("bash", "{}", "command"),
        ("bash", '{"command": "ls", "cwd": "/"}', "allowed: command, timeout"),
        ("bash", '{"command": 3}', "command"),
        ("python", "{}", "unknown tool 'python'"),
    ],
)
def test_malformed_calls_become_messages_for_the_model(
    name: str, arguments: str, needle: str
) -> None:
    problem = parse_arguments(_call(name, arguments))
    assert isinstance(problem, str)
    assert needle in problem


def test_truncate_keeps_head_and_tail_with_a_marker() -> None:
    text = "A" * 100 + "B" * 100
    cut, truncated = truncate(text, 50)
    assert truncated
    assert cut.startswith("A" * 25)
    assert cut.endswith("B" * 25)
    assert "[... 150 characters truncated ...]" in cut
    assert truncate("short", 50) == ("short", False)
