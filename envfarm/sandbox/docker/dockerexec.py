"""The Docker sandbox's fallback path: one ``docker exec`` per command, archives for files.

Used when ``DockerSandboxConfig.channel`` is False: for an engine reached over TLS or ssh,
whose connection cannot be handed to the channel, or to compare against the channel. Each
command costs an engine exec (create, start, inspect: tens of milliseconds). Exec wraps the
command in coreutils ``timeout``, so the image needs it, and on timeout the process group gets
TERM, then KILL a second later. Output is streamed and capped: past the cap the rest of a
stream is drained and dropped. Files go through archives as root; as another user, or under
gVisor (which keeps ``/tmp`` inside the sandbox and caches files, so the engine's archives do
not see what the sandbox sees), through commands: ``cat`` for a read, a shell reading the
data on its stdin for a write (a temporary file renamed over the target), run as that user so
its permissions apply. Blocking functions: the sandbox runs them in worker threads.
"""

from __future__ import annotations

import asyncio
import io
import socket
import tarfile
import time
from collections.abc import Awaitable, Callable, Iterator

import docker.errors
from docker.models.containers import Container

from envfarm.errors import SandboxError, SandboxGone
from envfarm.sandbox.base import ExecResult
from envfarm.sandbox.docker.client import docker_client

TIMEOUT_EXIT = 124
KILLED_EXIT = 137
NO_CAP = 1 << 62
ERROR_CAP = 64 * 1024
_WRITE_STDIN = (
    'set -e; umask 022; mkdir -p -- "$(dirname -- "$1")"; tmp="$1.envfarm-$$"; '
    'trap \'rm -f -- "$tmp"\' EXIT; cat > "$tmp"; chmod "$2" "$tmp"; '
    'mv -f -- "$tmp" "$1"; trap - EXIT'
)
_ERRORS: tuple[tuple[str, type[OSError]], ...] = (
    ("No such file", FileNotFoundError),
    ("Permission denied", PermissionError),
    ("Is a directory", IsADirectoryError),
    ("Not a directory", NotADirectoryError),
)


def exec_argv(command: str, timeout: float | None) -> list[str]:
    argv = ["bash", "-c", command]
    if timeout is not None:
        argv = ["timeout", "--kill-after=1", f"{max(timeout, 0.01):.3f}", *argv]
    return argv


def timed_out(exit_code: int, timeout: float | None, elapsed: float) -> bool:
    return timeout is not None and exit_code in (TIMEOUT_EXIT, KILLED_EXIT) and elapsed >= timeout


def exec_blocking(
    container_id: str,
    argv: list[str],
    workdir: str | None,
    env: dict[str, str],
    user: str,
    cap: int,
) -> tuple[int, bytes, bytes]:
    api = docker_client().api
    exec_id = api.exec_create(container_id, argv, workdir=workdir, environment=env, user=user)["Id"]
    chunks: Iterator[tuple[bytes | None, bytes | None]] = api.exec_start(
        exec_id, stream=True, demux=True
    )
    out, err = bytearray(), bytearray()
    for stdout_chunk, stderr_chunk in chunks:
        if stdout_chunk and len(out) < cap:
            out += stdout_chunk[: cap - len(out)]
        if stderr_chunk and len(err) < cap:
            err += stderr_chunk[: cap - len(err)]
    return _exit_code(exec_id), bytes(out), bytes(err)


def _exit_code(exec_id: str) -> int:
    """The exec's exit code; its stream can end a moment before the engine records it."""
    api = docker_client().api
    for _ in range(200):
        state = api.exec_inspect(exec_id)
        if not state.get("Running"):
            break
        time.sleep(0.01)
    code = state.get("ExitCode")
    return -1 if code is None else int(code)


def exec_with_input(
    container_id: str, argv: list[str], user: str, data: bytes
) -> tuple[int, bytes]:
    """Run ``argv`` with ``data`` on its stdin; return its exit code and stderr."""
    api = docker_client().api
    exec_id = api.exec_create(container_id, argv, stdin=True, user=user)["Id"]
    attached = api.exec_start(exec_id, socket=True)
    raw = getattr(attached, "_sock", attached)
    try:
        if not isinstance(raw, socket.socket):
            raise SandboxError("writing a file as a user needs a socket connection to the engine")
        raw.sendall(data)
        raw.shutdown(socket.SHUT_WR)
        received = bytearray()
        while chunk := raw.recv(65536):
            if len(received) < ERROR_CAP:
                received += chunk
    finally:
        attached.close()
    return _exit_code(exec_id), _stderr_frames(bytes(received))


def _stderr_frames(stream: bytes) -> bytes:
    """The stderr records of an attached stream (8-byte headers: stream id, size)."""
    err, offset = bytearray(), 0
    while offset + 8 <= len(stream):
        size = int.from_bytes(stream[offset + 4 : offset + 8], "big")
        if stream[offset] == 2:
            err += stream[offset + 8 : offset + 8 + size]
        offset += 8 + size
    return bytes(err)


def read_blocking(container: Container, path: str) -> bytes:
    stream, _ = container.get_archive(path)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
        member = archive.next()
        if member is None or member.isdir():
            raise IsADirectoryError(path)
        extracted = archive.extractfile(member)
        if extracted is None:
            raise SandboxError(f"{path} is not a regular file")
        return extracted.read()


def file_archive(path: str, data: bytes, mode: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo(path.lstrip("/"))
        info.size, info.mode, info.mtime = len(data), mode, int(time.time())
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def put_blocking(container: Container, tar_bytes: bytes) -> None:
    if not container.put_archive("/", tar_bytes):
        raise SandboxError("the engine refused the file upload")


def _user_error(path: str, stderr: bytes) -> OSError:
    message = stderr.decode(errors="replace").strip() or f"cannot access {path}"
    for text, error in _ERRORS:
        if text in message:
            return error(message)
    return OSError(message)


def read_by_command(container_id: str, path: str, user: str) -> bytes:
    code, out, err = exec_blocking(container_id, ["cat", "--", path], None, {}, user, NO_CAP)
    if code != 0:
        raise _user_error(path, err)
    return out


def write_by_command(container_id: str, path: str, data: bytes, mode: int, user: str) -> None:
    argv = ["sh", "-c", _WRITE_STDIN, "sh", path, f"{mode:o}"]
    code, err = exec_with_input(container_id, argv, user, data)
    if code != 0:
        raise _user_error(path, err)


class EnginePath:
    """One sandbox's commands and files through engine calls; ``check_gone`` raises
    ``SandboxGone`` when an engine error means the container died."""

    def __init__(
        self,
        container: Container,
        output_cap: int,
        check_gone: Callable[[Exception], Awaitable[None]],
        *,
        files_by_command: bool = False,
    ) -> None:
        self.container = container
        self.output_cap = output_cap
        self.check_gone = check_gone
        self.files_by_command = files_by_command
        """Always move files through commands (gVisor), not only for another user."""

    async def exec(
        self,
        command: str,
        timeout: float | None,
        workdir: str | None,
        env: dict[str, str],
        user: str,
    ) -> ExecResult:
        argv = exec_argv(command, timeout)
        started = time.monotonic()
        try:
            exit_code, out, err = await asyncio.to_thread(
                exec_blocking,
                *(str(self.container.id), argv, workdir, env, user, self.output_cap),
            )
        except docker.errors.NotFound as exc:
            raise SandboxGone(f"the sandbox container vanished: {exc}") from exc
        except docker.errors.APIError as exc:
            await self.check_gone(exc)
            raise SandboxError(f"exec failed: {exc}") from exc
        expired = timed_out(exit_code, timeout, time.monotonic() - started)
        return ExecResult(
            exit_code=None if expired else exit_code,
            stdout=out.decode(errors="replace"),
            stderr=err.decode(errors="replace"),
            timed_out=expired,
            duration_s=time.monotonic() - started,
        )

    async def read_file(self, path: str, user: str | None = None) -> bytes:
        container_id = str(self.container.id)
        try:
            if user or self.files_by_command:
                return await asyncio.to_thread(read_by_command, container_id, path, user or "0")
            return await asyncio.to_thread(read_blocking, self.container, path)
        except docker.errors.NotFound as exc:
            await self.check_gone(exc)
            raise FileNotFoundError(path) from exc
        except docker.errors.APIError as exc:
            await self.check_gone(exc)
            raise OSError(f"could not read {path}: {exc.explanation}") from exc

    async def write_file(self, path: str, data: bytes, mode: int, user: str | None = None) -> None:
        container_id = str(self.container.id)
        try:
            if user or self.files_by_command:
                await asyncio.to_thread(
                    write_by_command, container_id, path, data, mode, user or "0"
                )
                return
            await asyncio.to_thread(put_blocking, self.container, file_archive(path, data, mode))
        except docker.errors.APIError as exc:
            await self.check_gone(exc)
            raise OSError(f"could not write {path}: {exc.explanation}") from exc
