"""The tools of a task's MCP servers, offered to the built-in agent as tools of its own.

The only module that imports the ``mcp`` SDK (and its HTTP client, ``httpx2``). A server's URL
means what it means inside the sandbox (``http://mcp-server:8000/mcp`` names a sidecar on the
environment's internal network, which envfarm's side cannot reach), so every HTTP request of
the SDK's client is made *from the main container*: the request body is written into the
container, ``curl`` sends it, and the answer's headers and body are read back. The SDK's
optional GET stream for server-initiated messages is answered 405 (allowed by the protocol),
so only request/response exchanges are used.

Only ``streamable-http`` servers are connected this way (``sse`` needs a long-lived GET stream,
``stdio`` a long-lived process). A server that cannot be reached, or an image without
``curl``, leaves the agent with the instruction's MCP section and its bash tool, as Harbor's
own loops have; the reason is logged. Tool names are ``mcp__<server>__<tool>`` (OpenAI's
``[a-zA-Z0-9_-]{1,64}``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import re
import shlex
from typing import TYPE_CHECKING, Any

import httpx2

from envfarm.sandbox.base import Sandbox
from envfarm.spec.mcp import McpServer

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

log = logging.getLogger(__name__)

SCRATCH = "/tmp/.envfarm-agent/mcp"
REQUEST_TIMEOUT_S = 120.0
_NAME = re.compile(r"[^a-zA-Z0-9_-]")
_counter = itertools.count()


class _FromTheSandbox(httpx2.AsyncBaseTransport):
    """An HTTP transport that makes each request with curl inside the sandbox."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "GET":
            return httpx2.Response(405, request=request)
        n = next(_counter)
        body, head, out = f"{SCRATCH}/{n}.body", f"{SCRATCH}/{n}.head", f"{SCRATCH}/{n}.out"
        await self.sandbox.write_file(body, await request.aread())
        headers = " ".join(
            f"-H {shlex.quote(f'{k}: {v}')}"
            for k, v in request.headers.items()
            if k.lower() not in ("host", "content-length", "accept-encoding", "connection")
        )
        command = (
            f"curl -sS -X {request.method} -H 'Expect:' {headers} --data-binary @{body} "
            f"--max-time {REQUEST_TIMEOUT_S:g} -D {head} -o {out} {shlex.quote(str(request.url))}"
            f"; code=$?; rm -f {body}; exit $code"
        )
        done = await self.sandbox.exec(command, timeout=REQUEST_TIMEOUT_S + 10)
        if done.exit_code != 0:
            raise httpx2.ConnectError(
                f"curl in the sandbox failed ({done.exit_code}): {done.stderr.strip()[-300:]}",
                request=request,
            )
        raw_head = (await self.sandbox.read_file(head)).decode("latin-1")
        content = await self.sandbox.read_file(out)
        await self.sandbox.exec(f"rm -f {head} {out}")
        status, response_headers = _parse_head(raw_head)
        return httpx2.Response(status, headers=response_headers, content=content, request=request)


def _parse_head(raw: str) -> tuple[int, list[tuple[str, str]]]:
    """The last response's status and headers (curl writes interim ones first)."""
    blocks = [b for b in raw.replace("\r\n", "\n").split("\n\n") if b.strip()]
    lines = blocks[-1].split("\n")
    status = int(lines[0].split()[1])
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() not in ("transfer-encoding", "content-encoding"):
            headers.append((name.strip(), value.strip()))
    return status, headers


def tool_name(server: str, tool: str) -> str:
    return _NAME.sub("_", f"mcp__{server}__{tool}")[:64]


class McpTools:
    """Open with ``async with McpTools(servers, sandbox) as tools``, in the task that uses it."""

    def __init__(self, servers: list[McpServer], sandbox: Sandbox) -> None:
        self.servers = [s for s in servers if s.transport == "streamable-http"]
        self.sandbox = sandbox
        self.schemas: list[dict[str, Any]] = []
        self._routes: dict[str, tuple[ClientSession, str]] = {}
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> McpTools:
        for server in self.servers:
            try:
                await self._connect(server)
            except Exception as exc:  # a server the agent must do without
                log.warning("MCP server %s (%s): not connected: %s", server.name, server.url, exc)
        return self

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            await self._stack.aclose()

    async def _connect(self, server: McpServer) -> None:
        # imported here: the SDK takes most of a second to import, and most jobs have no server
        from mcp.client.session import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        assert server.url is not None
        stack = contextlib.AsyncExitStack()
        await stack.__aenter__()
        try:
            client = httpx2.AsyncClient(
                transport=_FromTheSandbox(self.sandbox),
                headers=server.headers,
                timeout=REQUEST_TIMEOUT_S,
            )
            await stack.enter_async_context(client)
            read, write = await stack.enter_async_context(
                streamable_http_client(server.url, http_client=client)
            )
            session = await stack.enter_async_context(
                ClientSession(read, write, read_timeout_seconds=REQUEST_TIMEOUT_S)
            )
            await session.initialize()
            listed = await session.list_tools()
        except BaseException:
            with contextlib.suppress(Exception):
                await stack.aclose()
            raise
        self._stack.push_async_callback(stack.aclose)
        for tool in listed.tools:
            name = tool_name(server.name, tool.name)
            self._routes[name] = (session, tool.name)
            parameters = dict(tool.input_schema or {"type": "object", "properties": {}})
            parameters.setdefault("properties", {})
            description = tool.description or f"{tool.name} of the {server.name} MCP server"
            self.schemas.append(
                {
                    "type": "function",
                    "function": {
                        "name": name,
                        "description": f"[MCP server {server.name}] {description}",
                        "parameters": parameters,
                    },
                }
            )

    def offers(self, name: str) -> bool:
        return name in self._routes

    async def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """The tool's text output and whether the server reported an error."""
        session, tool = self._routes[name]
        result = await session.call_tool(tool, arguments)
        content = getattr(result, "content", None) or []
        parts = [getattr(block, "text", None) or _dump(block) for block in content]
        structured = getattr(result, "structured_content", None)
        if not parts and structured is not None:
            parts.append(json.dumps(structured))
        return "\n".join(parts), bool(getattr(result, "is_error", False))


def _dump(block: object) -> str:
    dump = getattr(block, "model_dump", None)
    return json.dumps(dump(mode="json", exclude_none=True)) if callable(dump) else str(block)
