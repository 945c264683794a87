"""``[[environment.mcp_servers]]`` is read as Harbor reads it and reaches agents as Harbor's do:
installed agents by their spec's ``mcp`` (the instruction section, their own config, or a
refusal), the built-in loop by the instruction section Harbor's own loops get."""

from __future__ import annotations

import json
import textwrap
import tomllib

import pytest

from envfarm.agent.specs import AgentSpec, builtin_specs, parse_spec
from envfarm.errors import TaskSpecError
from envfarm.spec.config import TaskConfig
from envfarm.spec.mcp import McpServer, mcp_section
from envfarm.spec.task_toml import parse_task_config, read_task_config

FEATURE_ENGINEERING = """
[[environment.mcp_servers]]
name = "feature-engineering"
transport = "streamable-http"
url = "http://mcp-server:8000/mcp"
"""


def parse(toml: str) -> TaskConfig:
    return parse_task_config(tomllib.loads(textwrap.dedent(toml)), "task.toml")


def refused(toml: str) -> TaskSpecError:
    with pytest.raises(TaskSpecError) as caught:
        parse(toml)
    return caught.value


def test_a_streamable_http_server_in_a_sidecar_is_kept() -> None:
    (server,) = parse(FEATURE_ENGINEERING).environment.mcp_servers
    assert server == McpServer(
        name="feature-engineering", transport="streamable-http", url="http://mcp-server:8000/mcp"
    )


def test_harbor_defaults_http_alias_and_stdio() -> None:
    servers = parse(
        """
        [[environment.mcp_servers]]
        name = "legacy"
        url = "http://tools:9000/sse"
        [[environment.mcp_servers]]
        name = "plain"
        transport = "http"
        url = "http://tools:9000/mcp"
        headers = { Authorization = "Bearer ${TOOLS_TOKEN}" }
        [[environment.mcp_servers]]
        name = "local"
        transport = "stdio"
        command = "python3"
        args = ["-m", "tools.server"]
        """
    ).environment.mcp_servers
    assert [(s.name, s.transport) for s in servers] == [
        ("legacy", "sse"),
        ("plain", "streamable-http"),
        ("local", "stdio"),
    ]
    assert servers[1].headers == {"Authorization": "Bearer ${TOOLS_TOKEN}"}
    assert servers[2].args == ["-m", "tools.server"]


def test_a_later_server_of_the_same_name_replaces_the_earlier() -> None:
    servers = parse(
        """
        [[environment.mcp_servers]]
        name = "t"
        url = "http://a/mcp"
        [[environment.mcp_servers]]
        name = "t"
        url = "http://b/mcp"
        """
    ).environment.mcp_servers
    assert [s.url for s in servers] == ["http://b/mcp"]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('name = "x"', "'url' is required for transport 'sse'"),
        ('name = "x"\ntransport = "stdio"', "'command' is required for transport 'stdio'"),
        ('name = "x"\ntransport = "websocket"\nurl = "ws://x"', "stdio"),
        (
            'name = "x"\ntransport = "stdio"\ncommand = "srv"\nheaders = { A = "b" }',
            "HTTP transports only",
        ),
        ('name = "x"\nurl = "http://x"\nheaders = { "bad name" = "v" }', "header name"),
    ],
)
def test_an_invalid_server_names_the_field(entry: str, message: str) -> None:
    error = refused(f"[[environment.mcp_servers]]\n{entry}\n")
    assert (error.field or "").startswith("environment.mcp_servers[0]")
    assert message in error.detail


def test_an_unknown_key_of_a_server_is_a_warning() -> None:
    toml = FEATURE_ENGINEERING + 'description = "the submission service"\n'
    parsed = read_task_config(tomllib.loads(toml), "task.toml")
    assert parsed.unknown == {"environment.mcp_servers[0].description": "the submission service"}
    assert len(parsed.config.environment.mcp_servers) == 1


def test_the_instruction_section_is_harbors() -> None:
    servers = [
        McpServer(name="fe", transport="streamable-http", url="http://mcp-server:8000/mcp"),
        McpServer(name="local", transport="stdio", command="srv", args=["--x", "1"]),
    ]
    assert mcp_section(servers) == (
        "\n\nMCP Servers:\nThe following MCP servers are available for this task.\n"
        "- fe: streamable-http transport, url: http://mcp-server:8000/mcp\n"
        "- local: stdio transport, command: srv --x 1\n"
    )
    assert mcp_section([]) == ""


def _spec(mcp: str | None) -> AgentSpec:
    table: dict[str, object] = {"name": "a", "version": "1", "run": {"command": "x {mcp_servers}"}}
    if mcp is not None:
        table["mcp"] = mcp
    return parse_spec(table, "a.toml")


SERVERS = [McpServer(name="fe", transport="streamable-http", url="http://mcp-server:8000/mcp")]


def test_an_agent_without_mcp_support_is_refused_for_such_a_task() -> None:
    refusal = _spec(None).mcp_refusal(SERVERS)
    assert refusal is not None
    assert "fe" in refusal
    assert 'mcp = "instruction"' in refusal
    assert _spec(None).mcp_refusal([]) is None
    assert _spec("config").mcp_refusal(SERVERS) is None


def test_mini_swe_agent_gets_the_servers_in_its_instruction_as_under_harbor() -> None:
    spec = builtin_specs()["mini-swe-agent"]
    assert spec.mcp == "instruction"
    assert spec.agent_instruction("Do it.", SERVERS) == "Do it." + mcp_section(SERVERS)
    assert _spec("config").agent_instruction("Do it.", SERVERS) == "Do it."


def test_a_config_agent_gets_the_servers_as_json() -> None:
    declared = json.dumps([s.model_dump(exclude_defaults=True) for s in SERVERS])
    filled = _spec("config").fill(
        "x {mcp_servers}", instruction="", base_url="", model="", workdir="/", mcp_servers=declared
    )
    assert json.loads(filled.removeprefix("x ").strip("'")) == [
        {"name": "fe", "transport": "streamable-http", "url": "http://mcp-server:8000/mcp"}
    ]


def test_the_answer_head_is_the_last_one_curl_wrote() -> None:
    from envfarm.agent.mcp_tools import _parse_head

    raw = (
        "HTTP/1.1 100 Continue\r\n\r\n"
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nmcp-session-id: abc\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    )
    status, headers = _parse_head(raw)
    assert status == 200
    assert headers == [("content-type", "text/event-stream"), ("mcp-session-id", "abc")]


def test_tool_names_fit_openais_pattern() -> None:
    from envfarm.agent.mcp_tools import tool_name

    assert tool_name("feature-engineering", "submit") == "mcp__feature-engineering__submit"
    assert tool_name("a.b", "run tool") == "mcp__a_b__run_tool"
    assert len(tool_name("s" * 50, "t" * 50)) == 64
