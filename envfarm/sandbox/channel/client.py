"""The command channel into a sandbox: asyncio client of the in-sandbox helper ``sandboxd``.

The helper (``images/sandboxd/sandboxd.c``) is the container's main process; its stdin and
stdout are attached to envfarm through the engine's attach stream. A tool call is one request
on that open stream, not a ``docker exec``. ``Channel`` is what the helper serves, one method
per operation; the stream itself, with many requests in flight and what happens when it ends,
is ``connection.py``'s ``HelperConnection``, over Docker's hijacked connection
(``Channel.connect``) or a message stream such as a Kubernetes attach
(``Channel.over_stream``). What the answers mean is ``answers.py``'s.

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
  reclaim_processes {min_free}                    -> done {tasks, limit, killed}
  free_reserve {}                                 -> done {freed}
  walk        {path, out}                         -> done {entries, bytes}
  remove      {paths, contents?}                  -> done {removed, failed}
  sweep       {since}                             -> done {rounds, tmpfs, residue}
  any                                             -> error {errno, message, path?} instead

The helper serves requests concurrently (execs side by side, file reads one chunk per turn).
Writes go out in 1 MiB frames so other requests interleave with a large upload. A helper that
stops answering an exec ``ANSWER_GRACE_S`` past its own timeout is taken for gone
(``SandboxGone``), as is a stream that ends.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence
from typing import Any

from envfarm.errors import SandboxError
from envfarm.sandbox.channel.answers import ExecOutcome as ExecOutcome
from envfarm.sandbox.channel.answers import Sweep
from envfarm.sandbox.channel.answers import answer_error as answer_error
from envfarm.sandbox.channel.connection import Call, HelperConnection, Listener
from envfarm.sandbox.channel.streams import HelperStream, StreamTransport

WRITE_CHUNK = 1 << 20
ANSWER_GRACE_S = 30.0
DEFAULT_OUTPUT_CAP = 4 * 1024 * 1024


class Channel:
    """One helper's stream. Create with ``await Channel.connect(sock, name)``."""

    def __init__(self, connection: HelperConnection) -> None:
        self._connection = connection

    @classmethod
    async def connect(cls, sock: socket.socket, name: str) -> Channel:
        """Take over ``sock`` (an attached, hijacked engine connection)."""
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_connection(lambda: HelperConnection(name), sock=sock)
        return cls(connection)

    @classmethod
    async def over_stream(cls, stream: HelperStream, name: str) -> Channel:
        """Speak over ``stream`` (stdin one way, stdout and stderr apart the other)."""
        connection = HelperConnection(name)
        StreamTransport(stream, connection)
        return cls(connection)

    @property
    def name(self) -> str:
        return self._connection.name

    @property
    def failure(self) -> SandboxError | None:
        """Why the channel stopped working, or None while it works."""
        return self._connection.failure

    @property
    def diagnostics(self) -> str:
        """The last lines the helper wrote to its stderr."""
        return self._connection.diagnostics

    async def _request(
        self,
        header: dict[str, Any],
        payload: bytes | memoryview = b"",
        *,
        more: Sequence[memoryview] = (),
        guard_s: float | None = None,
    ) -> tuple[dict[str, Any], Call]:
        """Every operation's one request: its final answer, and the call with its streams."""
        return await self._connection.request(header, payload, more=more, guard_s=guard_s)

    def open_listener(self, header: dict[str, Any], listener: Listener) -> int:
        """Send a request whose every answer goes to ``listener``; return its id."""
        return self._connection.open_listener(header, listener)

    def close_listener(self, call_id: int) -> None:
        self._connection.close_listener(call_id)

    def send_frame(self, header: dict[str, Any], payload: bytes | memoryview = b"") -> None:
        """Write one frame now (no answer awaited); raises the channel's failure if any."""
        self._connection.send_frame(header, payload)

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

    async def free_reserve(self) -> int:
        """Have the helper give back the disk it holds for grading; how many bytes."""
        answer, _ = await self._request({"op": "free_reserve"})
        if answer.get("type") != "done":
            raise answer_error(answer, None)
        return int(answer.get("freed") or 0)

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
        if self._connection.failure is None:
            self._connection.fail(SandboxError(f"the channel to {self.name} was closed"))
