"""An asyncio transport over a message stream, so the channel runs on any carrier.

``HelperStream`` is what a carrier offers: ``send`` stdin bytes, ``receive`` ``(stream,
bytes)`` pieces (1 stdout, 2 stderr) or None at the end, ``close``. A Kubernetes attach or exec
WebSocket is one; the in-process helper of ``envfarm.testing.channel_emulator`` is another.
``StreamTransport`` adapts it to the ``asyncio.Transport`` the channel writes to: writes are
queued and sent in order by one task (coalesced up to ``CHUNK`` bytes), with the usual flow
control (the protocol is paused above ``HIGH_WATER`` queued bytes and resumed below
``LOW_WATER``); a second task feeds what arrives to the protocol. The end of the stream, a failed
send or a failed receive all end the connection once (``connection_lost``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Protocol

CHUNK = 1 << 20
HIGH_WATER = 4 << 20
LOW_WATER = 1 << 20


class HelperStream(Protocol):
    async def send(self, data: bytes) -> None: ...

    async def receive(self) -> tuple[int, bytes] | None: ...

    async def close(self) -> None: ...


class StreamProtocol(Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...

    def pause_writing(self) -> None: ...

    def resume_writing(self) -> None: ...

    def stream_received(self, stream: int, data: bytes | memoryview) -> None: ...


class StreamTransport(asyncio.Transport):
    def __init__(self, stream: HelperStream, protocol: StreamProtocol) -> None:
        super().__init__()
        self._stream = stream
        self._protocol = protocol
        self._queue: deque[bytes] = deque()
        self._queued = 0
        self._paused = False
        self._closing = False
        self._lost = False
        self._ready = asyncio.Event()
        loop = asyncio.get_running_loop()
        protocol.connection_made(self)
        self._writer = loop.create_task(self._write_loop(), name="channel writer")
        self._reader = loop.create_task(self._read_loop(), name="channel reader")

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        self._queue.append(bytes(data))
        self._queued += len(data)
        self._ready.set()
        if self._queued > HIGH_WATER and not self._paused:
            self._paused = True
            self._protocol.pause_writing()

    def get_write_buffer_size(self) -> int:
        return self._queued

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self.abort()

    def abort(self) -> None:
        if self._closing:
            return
        self._closing = True
        current = asyncio.current_task()
        for task in (self._writer, self._reader):
            if task is not current:
                task.cancel()
        asyncio.get_running_loop().create_task(self._close_stream())
        self._connection_lost(None)

    async def _close_stream(self) -> None:
        with contextlib.suppress(Exception):
            await self._stream.close()

    def _connection_lost(self, exc: Exception | None) -> None:
        if not self._lost:
            self._lost = True
            self._protocol.connection_lost(exc)

    async def _write_loop(self) -> None:
        try:
            while True:
                await self._ready.wait()
                self._ready.clear()
                while self._queue:
                    parts: list[bytes] = []
                    size = 0
                    while self._queue and (not parts or size + len(self._queue[0]) <= CHUNK):
                        part = self._queue.popleft()
                        parts.append(part)
                        size += len(part)
                    await self._stream.send(parts[0] if len(parts) == 1 else b"".join(parts))
                    self._queued -= size
                    if self._paused and self._queued < LOW_WATER:
                        self._paused = False
                        self._protocol.resume_writing()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the carrier failed: the channel is gone
            self._end(exc)

    async def _read_loop(self) -> None:
        try:
            while (piece := await self._stream.receive()) is not None:
                self._protocol.stream_received(*piece)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._end(exc)
            return
        self._end(None)

    def _end(self, exc: Exception | None) -> None:
        self._connection_lost(exc)
        self.abort()
