"""``[[environment.mcp_servers]]``: MCP servers the task offers its agent, as Harbor reads them.

Harbor's meaning: the task declares where a Model Context Protocol server is (an HTTP URL,
typically a sidecar service of the task's compose such as ``http://mcp-server:8000/mcp``, or a
stdio command to run inside the main container), and the agent harness is told about it: an
agent with native MCP support gets it in its own configuration, Harbor's own loops (Terminus-2,
mini-swe-agent) get a section appended to the instruction, and an agent that can do neither is
refused before the trial starts. envfarm keeps the same contract (docs/task-format.md). The
transport defaults to ``sse`` and ``http`` means ``streamable-http``, as in Harbor; a later
server of the same name replaces an earlier one.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

McpTransport = Literal["stdio", "sse", "streamable-http"]
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _transport(value: Any) -> Any:
    return "streamable-http" if value == "http" else value


class McpServer(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: Annotated[str, Field(min_length=1)]
    transport: Annotated[McpTransport, BeforeValidator(_transport)] = "sse"
    url: str | None = None
    """Required for ``sse`` and ``streamable-http``; resolved inside the sandbox (service names
    of the task's compose work)."""
    command: str | None = None
    """Required for ``stdio``: run by the agent's MCP client inside the main container."""
    args: list[str] = Field(default_factory=list)
    headers: dict[str, str] = Field(default_factory=dict)
    """HTTP transports only; values may name variables as ``${VAR}``."""

    @model_validator(mode="after")
    def _fields_of_the_transport(self) -> McpServer:
        if self.transport != "stdio" and not self.url:
            raise ValueError(f"'url' is required for transport {self.transport!r}")
        if self.transport == "stdio" and not self.command:
            raise ValueError("'command' is required for transport 'stdio'")
        if self.transport == "stdio" and self.headers:
            raise ValueError("'headers' applies to the HTTP transports only, not 'stdio'")
        for name, value in self.headers.items():
            if not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an HTTP header name")
            if "\r" in value or "\n" in value:
                raise ValueError(f"header {name!r} must not contain a line break")
        return self


def merge_by_name(servers: list[McpServer]) -> list[McpServer]:
    """Harbor's rule: a later server of the same name replaces an earlier one."""
    return list({server.name: server for server in servers}.values())


def mcp_section(servers: list[McpServer]) -> str:
    """The text Harbor's own loops append to the instruction (empty without servers)."""
    if not servers:
        return ""
    lines = ["", "", "MCP Servers:", "The following MCP servers are available for this task."]
    for server in servers:
        if server.transport == "stdio":
            shown = " ".join([server.command or "", *server.args])
            lines.append(f"- {server.name}: stdio transport, command: {shown}")
        else:
            lines.append(f"- {server.name}: {server.transport} transport, url: {server.url}")
    return "\n".join(lines) + "\n"
