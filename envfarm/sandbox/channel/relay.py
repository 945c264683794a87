"""Port relay over the helper channel: the Python side of ``images/sandboxd/relay.c``.

The helper listens on a loopback port inside the container and announces each connection
(``accept``), the bytes read from it (``conn_data``) and its end (``conn_end``) on the id of the
``relay_listen`` request. For each accepted connection ``PortRelay`` opens a TCP connection to
its target on envfarm's side and copies bytes both ways: what the target sends goes back as
``relay_send`` frames, its end as ``relay_close``. Bytes arriving before the target connection
is up are held and written once it is. ``serve_port`` needs no target connection: each accepted
connection is served by a protocol in this process (``_Served``), fed the ``conn_data`` payloads
as they come, its writes sent back as ``relay_send`` frames.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from envfarm.errors import SandboxError
from envfarm.sandbox.channel.answers import answer_error
from envfarm.sandbox.channel.client import Channel
from envfarm.sandbox.forwarding import Forward, PortForwarding


class _Target(asyncio.Protocol):
    def __init__(self, relay: PortRelay, conn: int) -> None:
        self.relay, self.conn = relay, conn
        self.transport: asyncio.Transport | None = None
        self.held: list[bytes] = []
        self.ended = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        for data in self.held:
            transport.write(data)
        self.held.clear()
        if self.ended:
            self.end()

    def data_received(self, data: bytes) -> None:
        self.relay.send(self.conn, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.relay.closed(self.conn)

    def deliver(self, data: bytes) -> None:
        """Bytes the program sent: to the target."""
        if self.transport is None:
            self.held.append(data)
        else:
            self.transport.write(data)

    def end(self) -> None:
        """The program's side ended: pass the end on; the target's answer still comes back."""
        self.ended = True
        if self.transport is not None and not self.transport.is_closing():
            if self.transport.can_write_eof():
                self.transport.write_eof()
            else:
                self.transport.close()

    def drop(self) -> None:
        if self.transport is not None:
            self.transport.close()


class _Served(asyncio.Transport):
    """The transport of a connection served in process: writes go back as relay frames."""

    def __init__(self, relay: PortRelay, conn: int, protocol: asyncio.Protocol) -> None:
        super().__init__({"peername": ("127.0.0.1", 0)})
        self.relay, self.conn, self.protocol = relay, conn, protocol
        self._closing = False
        protocol.connection_made(self)

    def deliver(self, data: bytes) -> None:
        if not self._closing:
            self.protocol.data_received(data)

    def end(self) -> None:
        if not self._closing and not self.protocol.eof_received():
            self.close()

    def drop(self) -> None:
        """The relay closed (its listener cancelled, or the channel gone)."""
        if not self._closing:
            self._closing = True
            self.protocol.connection_lost(None)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._closing and data:
            self.relay.send(self.conn, bytes(data))

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self.relay.closed(self.conn)
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def can_write_eof(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def is_reading(self) -> bool:
        return not self._closing

    def pause_reading(self) -> None:
        """Not supported: the relay's bytes keep coming (the protocol holds them)."""

    def resume_reading(self) -> None:
        pass


class PortRelay(Forward):
    def __init__(
        self,
        channel: Channel,
        host: str = "",
        port: int = 0,
        *,
        protocol_factory: Callable[[], asyncio.Protocol] | None = None,
    ) -> None:
        self.channel, self.host, self.target_port = channel, host, port
        self.protocol_factory = protocol_factory
        self.port = 0
        self._id: int | None = None
        self._ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._conns: dict[int, _Target | _Served] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self, inside_port: int = 0) -> PortRelay:
        self._id = self.channel.open_listener(
            {"op": "relay_listen", "host": "127.0.0.1", "port": inside_port}, self._on_frame
        )
        self.port = await self._ready
        return self

    def _on_frame(self, header: dict[str, Any], payload: bytes) -> None:
        kind, conn = header.get("type"), int(header.get("conn") or 0)
        if kind == "listening":
            self._ready.set_result(int(header["port"]))
        elif kind == "accept" and self.protocol_factory is not None:
            self._conns[conn] = _Served(self, conn, self.protocol_factory())
        elif kind == "accept":
            connecting = self._conns[conn] = _Target(self, conn)
            task = asyncio.get_running_loop().create_task(self._connect(connecting))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif kind == "conn_data" and conn in self._conns:
            self._conns[conn].deliver(payload)
        elif kind == "conn_end" and conn in self._conns:
            self._conns[conn].end()
        elif kind == "error" and not self._ready.done():
            self._ready.set_exception(answer_error(header, None))
        elif kind == "gone":
            if not self._ready.done():
                self._ready.set_exception(SandboxError("the sandbox helper's channel closed"))
            for target in list(self._conns.values()):
                if isinstance(target, _Served):
                    target.drop()
                else:
                    target.end()

    async def _connect(self, target: _Target) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.create_connection(lambda: target, self.host, self.target_port)
        except OSError:
            self.closed(target.conn)

    def send(self, conn: int, data: bytes) -> None:
        with contextlib.suppress(SandboxError):
            self.channel.send_frame({"id": self._id, "op": "relay_send", "conn": conn}, data)

    def closed(self, conn: int) -> None:
        if self._conns.pop(conn, None) is not None:
            with contextlib.suppress(SandboxError):
                self.channel.send_frame({"id": self._id, "op": "relay_close", "conn": conn})

    async def aclose(self) -> None:
        if self._id is not None:
            with contextlib.suppress(SandboxError):
                self.channel.close_listener(self._id)
        conns = list(self._conns.values())
        self._conns.clear()
        for target in conns:
            target.drop()
        for task in list(self._tasks):
            task.cancel()


class ChannelPortForwarding(PortForwarding):
    """``PortForwarding`` for a sandbox that holds a helper ``channel``."""

    @property
    def channel(self) -> Channel | None:
        raise NotImplementedError

    async def forward_port(self, host: str, port: int, *, inside_port: int = 0) -> Forward:
        if self.channel is None:
            raise SandboxError("this sandbox runs without its helper channel: no port relay")
        return await PortRelay(self.channel, host, port).start(inside_port)

    async def serve_port(
        self, protocol_factory: Callable[[], asyncio.Protocol], *, inside_port: int = 0
    ) -> Forward:
        if self.channel is None:
            raise SandboxError("this sandbox runs without its helper channel: no port relay")
        relay = PortRelay(self.channel, protocol_factory=protocol_factory)
        return await relay.start(inside_port)
