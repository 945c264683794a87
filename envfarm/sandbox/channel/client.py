"""The command channel into a sandbox: asyncio client of the in-sandbox helper ``sandboxd``.

The helper (``images/sandboxd/sandboxd.c``) is the container's main process; its stdin and
stdout are attached to envfarm through the engine's attach stream. A tool call is one request
on that open stream, not a ``docker exec``. The client is an ``asyncio.Protocol``: callbacks
parse what arrives, requests are written straight to the transport. Two carriers: Docker's
hijacked connection (one raw socket, no TTY, so the engine multiplexes stdout and stderr on it:
``protocol.StreamDemuxer``; ``Channel.connect``), and a message stream that already separates
them, such as a Kubernetes attach (``streams.StreamTransport``; ``Channel.over_stream``).

Protocol (the same text heads sandboxd.c). Both directions carry frames:

    u32 header_len | u32 payload_len | header (a JSON object, UTF-8) | payload (raw bytes)

lengths big endian, header_len 1..1 MiB, payload_len 0..16 MiB. Every header has an integer
"id" chosen here; requests carry "op", responses "type" and the id of their request.

  ping        {}                                  -> pong {version, pid}
  exec        {command | argv, cwd?, env?, user?, set_home?, timeout_s?, cap?, log?}
                                                  -> stdout* stderr* (payload: output bytes)
                                                     exit {exit_code, signal, timed_out,
                                                           stdout_truncated, stderr_truncated,
                                                           duration_s}
  read_file   {path, user?}                       -> data* (payload: file bytes) done {size}
  write_file  {path, mode, mkdir, user?, eof}     -> done {size}   (payload: first bytes;
  write_data  {eof}                                  more in write_data frames until eof)
  cancel      {}                                  -> nothing: kills the exec, drops the transfer
  walk        {path, out}                         -> done {entries, bytes}
  remove      {paths, contents?}                  -> done {removed, failed}
  sweep       {since}                             -> done {rounds, tmpfs, residue}
  any                                             -> error {errno, message, path?} instead

Many requests may be in flight at once; the helper serves them concurrently (execs side by
side, file reads one chunk per turn) and keeps each id's responses in order. Writes go out in
1 MiB frames so other requests interleave with a large upload. A cancelled coroutine sends
``cancel`` for its request: the command's process tree is killed, a transfer dropped.

Failures: the stream ending (the helper or the container died) fails every pending and later
request with ``SandboxGone``; a helper that stops answering an exec ``ANSWER_GRACE_S`` past
its own timeout is treated the same way. File errors come back as ``OSError`` built from the
helper's errno, so ENOENT is ``FileNotFoundError``, EISDIR ``IsADirectoryError``, EACCES
``PermissionError``.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import os
import socket
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envfarm.errors import SandboxError, SandboxGone
from envfarm.sandbox.channel.protocol import STDOUT, FrameDecoder, StreamDemuxer, frame_head
from envfarm.sandbox.channel.streams import HelperStream, StreamTransport

WRITE_CHUNK = 1 << 20
COALESCE_MAX = 256 << 10
"""A frame's payload up to this size is copied behind its header and written with it."""
ANSWER_GRACE_S = 30.0
DEFAULT_OUTPUT_CAP = 4 * 1024 * 1024
_DIAGNOSTICS_KEPT = 4096
_STREAMED = ("stdout", "stderr", "data")
Listener = Callable[[dict[str, Any], bytes], None]


class ExecOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")

    exit_code: int | None
    """None when the command was killed by a signal (see ``signal``) or timed out."""
    signal: int | None = None
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_s: float = 0.0

    def docker_exit_code(self) -> int | None:
        """``docker exec``'s convention: None on timeout, 128 + signal for a killed command."""
        if self.timed_out:
            return None
        if self.exit_code is not None:
            return self.exit_code
        return 128 + self.signal if self.signal else -1


class Sweep(BaseModel):
    """The helper's sweep: the tmpfs mounts a restart would have emptied, and what else would
    still tell this container from a restarted one (empty: nothing)."""

    model_config = ConfigDict(extra="ignore")

    tmpfs: list[str] = Field(default_factory=list)
    residue: list[str] = Field(default_factory=list)


class _Call:
    __slots__ = ("chunks", "future")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.future: asyncio.Future[dict[str, Any]] = loop.create_future()
        self.chunks: dict[str, list[bytes]] = {kind: [] for kind in _STREAMED}


class Channel(asyncio.Protocol):
    """One helper's stream. Create with ``await Channel.connect(sock, name)``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._transport: asyncio.Transport | None = None
        self._ids = itertools.count(1)
        self._calls: dict[int, _Call] = {}
        self._listeners: dict[int, Listener] = {}
        """Requests answered many times (``relay.py``): each of their frames goes to a callback."""
        self._failure: SandboxError | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._demux = StreamDemuxer()
        self._decoder = FrameDecoder()
        self._diagnostics = bytearray()

    @classmethod
    async def connect(cls, sock: socket.socket, name: str) -> Channel:
        """Take over ``sock`` (an attached, hijacked engine connection)."""
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        _, channel = await loop.create_connection(lambda: cls(name), sock=sock)
        return channel

    @classmethod
    async def over_stream(cls, stream: HelperStream, name: str) -> Channel:
        """Speak over ``stream`` (stdin one way, stdout and stderr apart the other)."""
        channel = cls(name)
        StreamTransport(stream, channel)
        return channel

    @property
    def failure(self) -> SandboxError | None:
        """Why the channel stopped working, or None while it works."""
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
            self._fail(exc)

    def stream_received(self, stream: int, data: bytes | memoryview) -> None:
        """A piece of the helper's stdout (``STDOUT``) or stderr, from a demultiplexed stream."""
        try:
            self._received(stream, data)
        except SandboxError as exc:
            self._fail(exc)

    def _received(self, stream: int, chunk: bytes | memoryview) -> None:
        if stream != STDOUT:
            self._diagnostics += chunk
            del self._diagnostics[:-_DIAGNOSTICS_KEPT]
            return
        for header, payload in self._decoder.feed(chunk):
            self._dispatch(header, payload)

    def connection_lost(self, exc: Exception | None) -> None:
        said = f"; it said: {self.diagnostics}" if self.diagnostics else ""
        self._fail(SandboxGone(f"the sandbox helper's channel closed{said}"))

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

    def _fail(self, exc: SandboxError) -> None:
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

    def _send(self, header: dict[str, Any], payload: bytes | memoryview = b"") -> None:
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

    async def _request(
        self,
        header: dict[str, Any],
        payload: bytes | memoryview = b"",
        *,
        more: Sequence[memoryview] = (),
        guard_s: float | None = None,
    ) -> tuple[dict[str, Any], _Call]:
        """Send a request (``more``: its write_data frames), return the final answer."""
        call_id = next(self._ids)
        call = _Call(asyncio.get_running_loop())
        self._calls[call_id] = call
        try:
            self._send({"id": call_id, **header}, payload)
            for index, chunk in enumerate(more):
                await self._drain()
                if call.future.done():
                    break  # refused early (say, an unknown user): the rest would be dropped
                self._send(
                    {"id": call_id, "op": "write_data", "eof": index == len(more) - 1}, chunk
                )
            async with asyncio.timeout(guard_s):
                return await call.future, call
        except TimeoutError:
            gone = SandboxGone(f"the sandbox helper did not answer within {guard_s:.0f} s")
            self._fail(gone)
            raise gone from None
        except asyncio.CancelledError:
            if self._calls.pop(call_id, None) is not None and self._failure is None:
                self._send({"id": call_id, "op": "cancel"})
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

    def send_frame(self, header: dict[str, Any], payload: bytes | memoryview = b"") -> None:
        """Write one frame now (no answer awaited); raises the channel's failure if any."""
        self._send(header, payload)

    async def ping(self) -> dict[str, Any]:
        answer, _ = await self._request({"op": "ping"})
        if answer.get("type") != "pong":
            raise answer_error(answer, None)
        return answer

    async def reclaim_processes(self, min_free: int) -> int:
        """Have the helper kill what finished commands left running when fewer than
        ``min_free`` processes are left under its limit; how many it killed."""
        answer, _ = await self._request({"op": "reclaim_processes", "min_free": min_free})
        if answer.get("type") != "done":
            raise answer_error(answer, None)
        return int(answer.get("killed") or 0)

    async def walk(self, path: str, out: str) -> int:
        """Have the helper list the file system ``path`` lies on into the file ``out`` (as
        root, not crossing mounts; records as ``sandboxd.c`` says); how many entries."""
        answer, _ = await self._request({"op": "walk", "path": path, "out": out})
        if answer.get("type") != "done":
            raise answer_error(answer, path)
        return int(answer.get("entries") or 0)

    async def sweep(self, since: float) -> Sweep:
        """Have the helper, the container's init, kill every other process (``sweep.c``)."""
        answer, _ = await self._request({"op": "sweep", "since": since})
        if answer.get("type") != "done":
            raise answer_error(answer, None)
        return Sweep.model_validate(answer)

    async def listing(self, path: str, scratch: str) -> bytes:
        """``walk`` into the file ``scratch``, read it, remove it."""
        try:
            await self.walk(path, scratch)
            return await self.read_file(scratch)
        finally:
            await self.remove([scratch])

    async def remove(self, paths: Sequence[str], contents: Sequence[str] = ()) -> int:
        """Have the helper remove each absolute path with everything below it (of each of
        ``contents``, what is below it; as root, never following a symlink or entering a
        mount); how many of ``paths`` are gone. SandboxError when some entry could not be
        removed."""
        if not paths and not contents:
            return 0
        request = {"op": "remove", "paths": list(paths), "contents": list(contents)}
        answer, _ = await self._request(request)
        if answer.get("type") != "done":
            raise answer_error(answer, None)
        if answer.get("failed"):
            raise SandboxError(f"the helper could not remove {answer['failed']} entries")
        return int(answer.get("removed") or 0)

    async def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        set_home: bool = True,
        timeout: float | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        log: str | None = None,
    ) -> ExecOutcome:
        """Run ``command`` (a string for ``bash -c``, or an argv) and wait for it. ``log``: its
        output is appended to that file in the sandbox instead of coming back."""
        header: dict[str, Any] = {"op": "exec", "cap": output_cap, "set_home": set_home}
        if isinstance(command, str):
            header["command"] = command
        else:
            header["argv"] = list(command)
        optional = {"cwd": cwd, "env": env, "user": user, "log": log}
        header.update({key: value for key, value in optional.items() if value})
        if timeout is not None:
            header["timeout_s"] = max(timeout, 0.0)
        guard = None if timeout is None else max(timeout, 0.0) + ANSWER_GRACE_S
        answer, call = await self._request(header, guard_s=guard)
        if answer.get("type") != "exit":
            raise answer_error(answer, None)
        return ExecOutcome(
            exit_code=answer.get("exit_code"),
            signal=answer.get("signal"),
            stdout=b"".join(call.chunks["stdout"]),
            stderr=b"".join(call.chunks["stderr"]),
            timed_out=bool(answer.get("timed_out")),
            stdout_truncated=bool(answer.get("stdout_truncated")),
            stderr_truncated=bool(answer.get("stderr_truncated")),
            duration_s=float(answer.get("duration_s") or 0.0),
        )

    async def read_file(self, path: str, *, user: str | None = None) -> bytes:
        header: dict[str, Any] = {"op": "read_file", "path": path}
        if user:
            header["user"] = user
        answer, call = await self._request(header)
        if answer.get("type") != "done":
            raise answer_error(answer, path)
        return b"".join(call.chunks["data"])

    async def write_file(
        self,
        path: str,
        data: bytes,
        *,
        mode: int = 0o644,
        user: str | None = None,
        mkdir: bool = True,
    ) -> None:
        """Write ``data`` atomically (temporary file, then rename), in 1 MiB frames."""
        view = memoryview(data)
        chunks = [view[start : start + WRITE_CHUNK] for start in range(0, len(data), WRITE_CHUNK)]
        first, more = (chunks[0], chunks[1:]) if chunks else (view, [])
        header: dict[str, Any] = {
            "op": "write_file",
            "path": path,
            "mode": mode,
            "mkdir": mkdir,
            "eof": not more,
        }
        if user:
            header["user"] = user
        answer, _ = await self._request(header, first, more=more)
        if answer.get("type") != "done":
            raise answer_error(answer, path)

    def close(self) -> None:
        """Close the stream: the helper sees EOF, kills what it runs and exits."""
        if self._failure is None:
            self._fail(SandboxError(f"the channel to {self.name} was closed"))


def answer_error(answer: dict[str, Any], path: str | None) -> Exception:
    """The exception an ``error`` answer (or an unexpected one) stands for: ``OSError`` (by
    errno, so ENOENT is ``FileNotFoundError``) for a file ``path``, else ``SandboxError``."""
    if answer.get("type") != "error":
        return SandboxError(f"unexpected answer from the sandbox helper: {answer}")
    code = int(answer.get("errno") or errno.EIO)
    message = str(answer.get("message") or os.strerror(code))
    if code == errno.ESHUTDOWN:
        return SandboxGone(f"the sandbox is shutting down ({message})")
    if path is None:
        return SandboxError(f"the sandbox helper refused the request: {message}")
    return OSError(code, message, str(answer.get("path") or path))
