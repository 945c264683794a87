"""An optional sandbox capability: a loopback port inside the sandbox that reaches the host.

An installed agent talks to its capture endpoint (``agent.capture``) on ``127.0.0.1:PORT``
inside its own sandbox. No network is involved: the backend carries each connection over the
stream it already holds to the sandbox (the Docker backend's helper channel, ``channel.relay``),
so a task with ``network_mode = "none"`` keeps its isolation and still reaches the endpoint.
``serve_port`` goes one step further for a server envfarm runs itself: each connection is
served by a protocol in envfarm's process, fed the relayed bytes directly, with no socket and no
loopback hop on envfarm's side.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable

from envfarm.errors import SandboxError
from envfarm.sandbox.base import Sandbox


class Forward(ABC):
    port: int
    """The port inside the sandbox."""

    @abstractmethod
    async def aclose(self) -> None:
        """Stop listening and close every relayed connection."""


class PortForwarding(ABC):
    @abstractmethod
    async def forward_port(self, host: str, port: int, *, inside_port: int = 0) -> Forward:
        """Listen on ``127.0.0.1:inside_port`` in the sandbox (0: any free port) and connect
        each connection made there to ``host:port`` on envfarm's side."""

    @abstractmethod
    async def serve_port(
        self, protocol_factory: Callable[[], asyncio.Protocol], *, inside_port: int = 0
    ) -> Forward:
        """Listen on ``127.0.0.1:inside_port`` in the sandbox and serve each connection made
        there with a protocol from ``protocol_factory``, in this process: its transport's
        writes go back to the connection, and ``eof_received`` is called when the program ends
        its side (a falsy return closes the connection)."""


def port_forwarding(sandbox: Sandbox) -> PortForwarding:
    if isinstance(sandbox, PortForwarding):
        return sandbox
    raise SandboxError(
        f"{type(sandbox).__name__} cannot relay a port into the sandbox, which installed agents "
        "need to reach their model endpoint; use the built-in agent with this backend"
    )
