"""The stream to one helper: frames out, frames in, each answer to the request it is for.

``HelperConnection`` is an ``asyncio.Protocol``: callbacks parse what arrives, requests are
written straight to the transport. Two carriers: Docker's hijacked connection (one raw socket,
no TTY, so the engine multiplexes stdout and stderr on it: ``protocol.StreamDemuxer``), and a
message stream that already separates them, such as a Kubernetes attach
(``streams.StreamTransport``, which calls ``stream_received``). The helper's stderr is kept as
diagnostics, its last lines quoted when the stream ends.

Many requests may be in flight at once; the helper serves them concurrently and keeps each id's
responses in order. A request's streamed answers (``stdout``, ``stderr``, ``data``) are
gathered until its final answer. A frame's payload up to ``COALESCE_MAX`` goes out in one write
with its header; the transport's flow control pauses further frames. A cancelled coroutine sends
``cancel`` for its request: the command's process tree is killed, a transfer dropped. A request
answered many times (a port relay's listener, ``relay.py``) hands each of its frames to a
callback instead.

Failures: the stream ending (the helper or the container died) fails every pending and later
request with ``SandboxGone``; a helper that stops answering within a request's guard (an exec's
own timeout plus a grace) is treated the same way.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence
from typing import Any

from envfarm.errors import SandboxError, SandboxGone
from envfarm.sandbox.channel.protocol import STDOUT, FrameDecoder, StreamDemuxer, frame_head

COALESCE_MAX = 256 << 10
"""A frame's payload up to this size is copied behind its header and written with it."""
_DIAGNOSTICS_KEPT = 4096
_STREAMED = ("stdout", "stderr", "data")
Listener = Callable[[dict[str, Any], bytes], None]


class Call:
    """One request in flight: its final answer to come, and its streamed answers so far."""

    __slots__ = ("chunks", "future")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.future: asyncio.Future[dict[str, Any]] = loop.create_future()
        self.chunks: dict[str, list[bytes]] = {kind: [] for kind in _STREAMED}


class HelperConnection(asyncio.Protocol):
    def __init__(self, name: str) -> None:
        self.name = name
        self._transport: asyncio.Transport | None = None
        self._ids = itertools.count(1)
        self._calls: dict[int, Call] = {}
        self._listeners: dict[int, Listener] = {}
        """Requests answered many times (``relay.py``): each of their frames goes to a callback."""
        self._failure: SandboxError | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._demux = StreamDemuxer()
        self._decoder = FrameDecoder()
        self._diagnostics = bytearray()

    @property
    def failure(self) -> SandboxError | None:
        """Why the connection stopped working, or None while it works."""
        return self._failure

    @property
    def diagnostics(self) -> str:
        """The last lines the helper wrote to its stderr."""
        return self._diagnostics.decode(errors="replace").strip()

    # -- asyncio.Protocol callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        """Docker's multiplexed attach stream."""
        try:
            for stream, chunk in self._demux.feed(data):
                self._received(stream, chunk)
        except SandboxError as exc:
            self.fail(exc)

    def stream_received(self, stream: int, data: bytes | memoryview) -> None:
        """A piece of the helper's stdout (``STDOUT``) or stderr, from a demultiplexed stream."""
        try:
            self._received(stream, data)
        except SandboxError as exc:
            self.fail(exc)

    def _received(self, stream: int, chunk: bytes | memoryview) -> None:
        if stream != STDOUT:
            self._diagnostics += chunk
            del self._diagnostics[:-_DIAGNOSTICS_KEPT]
            return
        for header, payload in self._decoder.feed(chunk):
            self._dispatch(header, payload)

    def connection_lost(self, exc: Exception | None) -> None:
        said = f"; it said: {self.diagnostics}" if self.diagnostics else ""
        self.fail(SandboxGone(f"the sandbox helper's channel closed{said}"))

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def _dispatch(self, header: dict[str, Any], payload: bytes) -> None:
        kind = header.get("type")
        listener = self._listeners.get(header["id"])
        if listener is not None:
            listener(header, payload)
            return
        call = self._calls.get(header["id"])
        if call is None:
            if header["id"] == 0:
                raise SandboxError(f"the sandbox helper rejected a request: {header}")
            return  # a cancelled request's late answer
        if kind in _STREAMED:
            call.chunks[str(kind)].append(payload)
            return
        del self._calls[header["id"]]
        if not call.future.done():
            call.future.set_result(header)

    def fail(self, exc: SandboxError) -> None:
        """Stop working for good: every pending request and listener learns why."""
        if self._failure is None:
            self._failure = exc
        calls, self._calls = self._calls, {}
        listeners, self._listeners = self._listeners, {}
        for listener in listeners.values():
            listener({"type": "gone"}, b"")
        for call in calls.values():
            if not call.future.done():
                call.future.set_exception(self._failure)
        self._writable.set()
        if self._transport is not None:
            self._transport.abort()

    # -- requests

    def send_frame(self, header: dict[str, Any], payload: bytes | memoryview = b"") -> None:
        """Write one frame now (no answer awaited); raises the connection's failure if any."""
        if self._failure is not None:
            raise self._failure
        assert self._transport is not None
        head = frame_head(header, len(payload))
        if len(payload) <= COALESCE_MAX:  # one write: one send, one wakeup on the other side
            self._transport.write(head + payload if payload else head)
        else:
            self._transport.write(head)
            self._transport.write(payload)

    async def _drain(self) -> None:
        await self._writable.wait()
        if self._failure is not None:
            raise self._failure

    async def request(
        self,
        header: dict[str, Any],
        payload: bytes | memoryview = b"",
        *,
        more: Sequence[memoryview] = (),
        guard_s: float | None = None,
    ) -> tuple[dict[str, Any], Call]:
        """Send a request (``more``: its write_data frames), return the final answer."""
        call_id = next(self._ids)
        call = Call(asyncio.get_running_loop())
        self._calls[call_id] = call
        try:
            self.send_frame({"id": call_id, **header}, payload)
            for index, chunk in enumerate(more):
                await self._drain()
                if call.future.done():
                    break  # refused early (say, an unknown user): the rest would be dropped
                self.send_frame(
                    {"id": call_id, "op": "write_data", "eof": index == len(more) - 1}, chunk
                )
            async with asyncio.timeout(guard_s):
                return await call.future, call
        except TimeoutError:
            gone = SandboxGone(f"the sandbox helper did not answer within {guard_s:.0f} s")
            self.fail(gone)
            raise gone from None
        except asyncio.CancelledError:
            if self._calls.pop(call_id, None) is not None and self._failure is None:
                self.send_frame({"id": call_id, "op": "cancel"})
            raise

    def open_listener(self, header: dict[str, Any], listener: Listener) -> int:
        """Send a request whose every answer goes to ``listener``; return its id."""
        call_id = next(self._ids)
        self._listeners[call_id] = listener
        self.send_frame({"id": call_id, **header})
        return call_id

    def close_listener(self, call_id: int) -> None:
        if self._listeners.pop(call_id, None) is not None and self._failure is None:
            self.send_frame({"id": call_id, "op": "cancel"})
