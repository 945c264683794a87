"""The helper's side of the channel protocol in-process, serving a ``Sandbox`` (say a fake one).

A fake pod needs something to attach to: ``HelperEmulator(sandbox).stream()`` is a
``HelperStream`` that decodes requests as ``sandboxd`` does and answers them from the sandbox's
own ``exec``, ``read_file`` and ``write_file``, with the same frames (output and file data in
payloads, errors with their errno, requests served concurrently, ``cancel`` honoured). The
client side under test is the real ``Channel``; only the far end is simulated.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shlex
from typing import Any

from envfarm.errors import SandboxError
from envfarm.sandbox.base import Sandbox
from envfarm.sandbox.channel.protocol import STDOUT, FrameDecoder, encode_frame

CHUNK = 64 * 1024
PROTOCOL_VERSION = 1
_ERRNO: dict[type[OSError], int] = {
    FileNotFoundError: errno.ENOENT,
    IsADirectoryError: errno.EISDIR,
    NotADirectoryError: errno.ENOTDIR,
    PermissionError: errno.EACCES,
    FileExistsError: errno.EEXIST,
}


class HelperEmulator:
    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self._decoder = FrameDecoder()
        self._out: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._uploads: dict[int, tuple[dict[str, Any], bytearray]] = {}
        self.closed = False

    def stream(self) -> HelperEmulator:
        return self

    # -- HelperStream

    async def send(self, data: bytes) -> None:
        if self.closed:
            raise ConnectionResetError("the helper has exited")
        for header, payload in self._decoder.feed(data):
            self._request(header, payload)

    async def receive(self) -> tuple[int, bytes] | None:
        data = await self._out.get()
        if data is None:
            self._out.put_nowait(None)
            return None
        return STDOUT, data

    async def close(self) -> None:
        """The stream ends (stdin EOF, or the container stopped): kill what runs."""
        if self.closed:
            return
        self.closed = True
        for task in self._tasks.values():
            task.cancel()
        self._out.put_nowait(None)

    # -- serving

    def _answer(self, header: dict[str, Any], payload: bytes = b"") -> None:
        if not self.closed:
            self._out.put_nowait(encode_frame(header, payload))

    def _request(self, header: dict[str, Any], payload: bytes) -> None:
        call_id, op = header["id"], header.get("op")
        if op == "cancel":
            if (task := self._tasks.pop(call_id, None)) is not None:
                task.cancel()
            self._uploads.pop(call_id, None)
            return
        if op == "write_data":
            upload = self._uploads.get(call_id)
            if upload is not None:
                upload[1].extend(payload)
                if header.get("eof"):
                    self._serve(call_id, self._write(upload[0], bytes(upload[1])))
            return
        if op == "write_file" and not header.get("eof"):
            self._uploads[call_id] = (header, bytearray(payload))
            return
        if op == "ping":
            self._answer({"id": call_id, "type": "pong", "version": PROTOCOL_VERSION, "pid": 1})
        elif op == "exec":
            self._serve(call_id, self._exec(header))
        elif op == "read_file":
            self._serve(call_id, self._read(header))
        elif op == "write_file":
            self._serve(call_id, self._write(header, payload))
        else:
            self._error(call_id, errno.EINVAL, f"unknown op {op!r}")

    def _serve(self, call_id: int, work: Any) -> None:
        async def run() -> None:
            try:
                await work
            except OSError as exc:
                code = exc.errno or _ERRNO.get(type(exc), errno.EIO)
                self._error(call_id, code, exc.strerror or os.strerror(code), exc.filename)
            except SandboxError as exc:
                self._error(call_id, errno.EIO, str(exc))
            finally:
                self._tasks.pop(call_id, None)
                self._uploads.pop(call_id, None)

        self._tasks[call_id] = asyncio.get_running_loop().create_task(run())

    def _error(self, call_id: int, code: int, message: str, path: Any = None) -> None:
        header: dict[str, Any] = {"id": call_id, "type": "error", "errno": code}
        header["message"] = message or os.strerror(code)
        if path:
            header["path"] = str(path)
        self._answer(header)

    async def _exec(self, header: dict[str, Any]) -> None:
        call_id = header["id"]
        command = header.get("command") or shlex.join(header.get("argv") or [])
        result = await self.sandbox.exec(
            command,
            timeout=header.get("timeout_s"),
            workdir=header.get("cwd"),
            env=header.get("env"),
            user=header.get("user"),
        )
        cap = int(header.get("cap") or 1 << 62)
        out, err = result.stdout.encode(), result.stderr.encode()
        for kind, data in (("stdout", out[:cap]), ("stderr", err[:cap])):
            for start in range(0, len(data), CHUNK):
                self._answer({"id": call_id, "type": kind}, data[start : start + CHUNK])
        self._answer(
            {
                "id": call_id,
                "type": "exit",
                "exit_code": result.exit_code,
                "signal": None,
                "timed_out": result.timed_out,
                "stdout_truncated": len(out) > cap,
                "stderr_truncated": len(err) > cap,
                "duration_s": result.duration_s,
            }
        )

    async def _read(self, header: dict[str, Any]) -> None:
        data = await self.sandbox.read_file(header["path"])
        for start in range(0, len(data), CHUNK):
            self._answer({"id": header["id"], "type": "data"}, data[start : start + CHUNK])
        self._answer({"id": header["id"], "type": "done", "size": len(data)})

    async def _write(self, header: dict[str, Any], data: bytes) -> None:
        await self.sandbox.write_file(header["path"], data, int(header.get("mode", 0o644)))
        self._answer({"id": header["id"], "type": "done", "size": len(data)})
