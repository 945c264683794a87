"""Docker backend of the ``Sandbox`` interface.

Hardened by default for untrusted model code: no network unless asked, every capability dropped
but the few a root package install needs, no-new-privileges, memory (= memory+swap), CPU, pids
limits, ``--init`` to reap zombies. Every container carries envfarm's labels and
the owner's host and pid, so ``reap_orphans`` can remove what a killed run left behind; live
containers are also tracked in-process and force-removed at interpreter exit.

Exec wraps the command in coreutils ``timeout`` so the whole process group is signalled on
timeout (TERM, then KILL a second later), and streams output so a chatty command cannot exhaust
memory: past ``output_cap`` bytes per stream the rest is drained and dropped.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import io
import os
import socket
import tarfile
import time
from collections.abc import Iterator
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container
from pydantic import BaseModel, ConfigDict, Field

from envfarm.errors import SandboxError, SandboxGone, SandboxStartError
from envfarm.sandbox.base import ExecResult, Sandbox
from envfarm.sandbox.docker.client import docker_client

LABEL_MANAGED = "io.envfarm.managed"
LABEL_KIND = "io.envfarm.kind"
LABEL_RUN = "io.envfarm.run"
LABEL_OWNER = "io.envfarm.owner"
LABEL_TASK = "io.envfarm.task"

TIMEOUT_EXIT = 124
KILLED_EXIT = 137
DEFAULT_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID"]


class DockerSandboxConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    image: str
    network: bool = False
    """False: ``--network none``. True: the default bridge (the task asked for the network)."""
    cpus: float = 1.0
    memory_mb: int = 2048
    pids_limit: int = 1024
    workdir: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    cap_add: list[str] = Field(default_factory=lambda: list(DEFAULT_CAPS))
    runtime: str | None = None
    run_id: str = "adhoc"
    task_id: str = ""
    output_cap: int = 4 * 1024 * 1024
    """Bytes kept per stream of one exec; the rest is dropped."""


def owner_label() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


_live: dict[str, Container] = {}


def _remove_live_containers() -> None:
    for container in list(_live.values()):
        with contextlib.suppress(docker.errors.DockerException):
            container.remove(force=True, v=True)
    _live.clear()


atexit.register(_remove_live_containers)


class DockerSandbox(Sandbox):
    def __init__(self, config: DockerSandboxConfig) -> None:
        self.config = config
        self._container: Container | None = None

    @property
    def container_id(self) -> str:
        if self._container is None:
            raise SandboxError("sandbox is not started")
        return str(self._container.id)

    async def start(self) -> None:
        try:
            self._container = await asyncio.to_thread(self._run_container)
        except docker.errors.ImageNotFound as exc:
            raise SandboxStartError(f"image {self.config.image!r} does not exist") from exc
        except docker.errors.DockerException as exc:
            raise SandboxStartError(f"could not start a container: {exc}") from exc
        _live[self.container_id] = self._container

    def _run_container(self) -> Container:
        """Create then start: ``containers.run`` would try to pull a missing image."""
        cfg = self.config
        kwargs: dict[str, Any] = {}
        if cfg.runtime:
            kwargs["runtime"] = cfg.runtime
        container = docker_client().containers.create(
            cfg.image,
            command=["sleep", "infinity"],
            entrypoint=[],
            init=True,
            hostname="sandbox",
            working_dir=cfg.workdir,
            environment=cfg.env,
            network_mode="bridge" if cfg.network else "none",
            cap_drop=["ALL"],
            cap_add=cfg.cap_add,
            security_opt=["no-new-privileges"],
            mem_limit=f"{cfg.memory_mb}m",
            memswap_limit=f"{cfg.memory_mb}m",
            nano_cpus=int(cfg.cpus * 1e9),
            pids_limit=cfg.pids_limit,
            labels={
                LABEL_MANAGED: "true",
                LABEL_KIND: "sandbox",
                LABEL_RUN: cfg.run_id,
                LABEL_OWNER: owner_label(),
                LABEL_TASK: cfg.task_id,
            },
            **kwargs,
        )
        try:
            container.start()
        except docker.errors.DockerException:
            container.remove(force=True, v=True)
            raise
        return container

    async def exec(
        self,
        command: str,
        *,
        timeout: float | None = None,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
    ) -> ExecResult:
        argv = ["bash", "-c", command]
        if timeout is not None:
            argv = ["timeout", "--kill-after=1", f"{max(timeout, 0.01):.3f}", *argv]
        started = time.monotonic()
        try:
            exit_code, out, err = await asyncio.to_thread(
                self._exec_blocking, argv, workdir, env or {}, user or ""
            )
        except docker.errors.NotFound as exc:
            raise SandboxGone(f"the sandbox container vanished: {exc}") from exc
        except docker.errors.APIError as exc:
            await self._raise_if_gone(exc)
            raise SandboxError(f"exec failed: {exc}") from exc
        timed_out = (
            timeout is not None
            and exit_code in (TIMEOUT_EXIT, KILLED_EXIT)
            and time.monotonic() - started >= timeout
        )
        return ExecResult(
            exit_code=None if timed_out else exit_code,
            stdout=out.decode(errors="replace"),
            stderr=err.decode(errors="replace"),
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
        )

    def _exec_blocking(
        self, argv: list[str], workdir: str | None, env: dict[str, str], user: str
    ) -> tuple[int, bytes, bytes]:
        api = docker_client().api
        exec_id = api.exec_create(
            self.container_id, argv, workdir=workdir, environment=env, user=user
        )["Id"]
        chunks: Iterator[tuple[bytes | None, bytes | None]] = api.exec_start(
            exec_id, stream=True, demux=True
        )
        out, err = bytearray(), bytearray()
        cap = self.config.output_cap
        for stdout_chunk, stderr_chunk in chunks:
            if stdout_chunk and len(out) < cap:
                out += stdout_chunk[: cap - len(out)]
            if stderr_chunk and len(err) < cap:
                err += stderr_chunk[: cap - len(err)]
        code = api.exec_inspect(exec_id)["ExitCode"]
        return (-1 if code is None else int(code)), bytes(out), bytes(err)

    async def _raise_if_gone(self, exc: Exception) -> None:
        try:
            state = await asyncio.to_thread(self._state)
        except docker.errors.NotFound as gone:
            raise SandboxGone("the sandbox container vanished") from gone
        if not state.get("Running", False):
            why = "killed by the kernel's OOM killer" if state.get("OOMKilled") else "exited"
            raise SandboxGone(
                f"the sandbox container {why} (exit code {state.get('ExitCode')})"
            ) from exc

    def _state(self) -> dict[str, Any]:
        assert self._container is not None
        self._container.reload()
        return dict(self._container.attrs["State"])

    async def read_file(self, path: str) -> bytes:
        try:
            return await asyncio.to_thread(self._read_blocking, path)
        except docker.errors.NotFound as exc:
            await self._raise_if_gone(exc)
            raise FileNotFoundError(path) from exc
        except docker.errors.APIError as exc:
            await self._raise_if_gone(exc)
            raise OSError(f"could not read {path}: {exc.explanation}") from exc

    def _read_blocking(self, path: str) -> bytes:
        assert self._container is not None
        stream, _ = self._container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
            member = archive.next()
            if member is None or member.isdir():
                raise IsADirectoryError(path)
            extracted = archive.extractfile(member)
            if extracted is None:
                raise SandboxError(f"{path} is not a regular file")
            return extracted.read()

    async def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        if not path.startswith("/"):
            raise ValueError(f"sandbox paths must be absolute, got {path!r}")
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            archive.addfile(info, io.BytesIO(data))
        try:
            await asyncio.to_thread(self._put_archive, buffer.getvalue())
        except docker.errors.APIError as exc:
            await self._raise_if_gone(exc)
            raise OSError(f"could not write {path}: {exc.explanation}") from exc

    def _put_archive(self, tar_bytes: bytes) -> None:
        assert self._container is not None
        if not self._container.put_archive("/", tar_bytes):
            raise SandboxError("the engine refused the file upload")

    async def _teardown(self) -> None:
        if self._container is None:
            return
        container, self._container = self._container, None
        try:
            await asyncio.to_thread(container.remove, force=True, v=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.DockerException as exc:
            raise SandboxError(f"could not remove container {container.short_id}: {exc}") from exc
        finally:
            _live.pop(str(container.id), None)
