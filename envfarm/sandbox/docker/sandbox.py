"""Docker backend of the ``Sandbox`` interface.

Hardened by default for untrusted model code: no network unless asked, every capability dropped
but the few a root package install needs, no-new-privileges, memory (= memory+swap), CPU, pids
limits, an init that reaps zombies (the helper, or ``--init``). Every container carries
envfarm's labels and the owner's host and pid, so ``reap_orphans`` can remove what a killed run
left behind; live containers are also tracked in-process and force-removed at interpreter exit.

Commands and files go through a persistent channel, not a ``docker exec`` per call: the main
process, the container's init, is the static helper ``sandboxd`` (``sandboxd.py`` builds and
provides it, ``sandbox/channel/`` speaks its protocol; docs/sandbox.md), running as root, its stdin
and stdout attached before the container starts: a tool call is one round trip on an open
stream. Its stdout is protocol frames, so the log driver is ``none``. When the helper ends, the
container ends with it and every later call raises ``SandboxGone``. ``channel=False`` keeps
the engine path (``dockerexec.py``) for engines reached over TLS or ssh.

Under gVisor (``runtimes.py``) the helper's compatibility library comes along, and the engine
path moves files through commands. A task whose verifier phase has other network access than
its agent phase gets the default bridge joined or left by ``enter_verifier_phase``. Memory
limits keep the helper alive when the agent's commands exceed them (``excess.py``).

The image's ``ENTRYPOINT`` (with the compose ``command``) runs as Harbor runs it, as a child of
the helper whose output goes to a log file (``mainprocess.py``); ``process_logs`` reads it.
For clean-room grading ``end_processes`` has the helper kill every other process, or
``restart_clean`` kills and restarts the container (grading/cleanroom/inplace.py);
``fork_clean`` kills it, keeping it until teardown, and hands out a fresh one of the same
configuration, started by ``prepare_fork`` as the agent stopped (it runs only the helper).
Teardown removes the container and its forks at once: each removal is the engine deleting a
file system (about a second here), and nothing orders them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import docker
import docker.errors
from docker.models.containers import Container
from docker.types import Mount

from envfarm.errors import EnvironmentUnsupported, SandboxError, SandboxGone, SandboxStartError
from envfarm.sandbox.base import (
    ExecResult,
    InPlaceGrading,
    ProcessLogs,
    ProcessReclaim,
    Sandbox,
    Swept,
    VerifierPhases,
)
from envfarm.sandbox.channel.client import Channel
from envfarm.sandbox.channel.relay import ChannelPortForwarding
from envfarm.sandbox.docker import dockerexec
from envfarm.sandbox.docker.containers import gone_error, kill_container, read_archived
from envfarm.sandbox.docker.containers import live_containers as _live
from envfarm.sandbox.docker.create import create_container
from envfarm.sandbox.docker.excess import PIDS_RESERVE
from envfarm.sandbox.docker.limits import start_error
from envfarm.sandbox.docker.mainprocess import MAIN_LOG, MainProcess, image_config, main_argv
from envfarm.sandbox.docker.networks import (
    join_default_bridge,
    switch_default_bridge_from_none,
)
from envfarm.sandbox.docker.runtimes import is_gvisor
from envfarm.sandbox.docker.sandbox_config import DockerSandboxConfig as DockerSandboxConfig
from envfarm.sandbox.docker.sandboxd import (
    HELPER_DIR,
    HELPER_PATH,
    attach_helper,
    ensure_helper,
    helper_mounts,
    upload_helper,
)
from envfarm.sandbox.docker.sweep import sweep_in_place

GONE_SETTLE_S = 2.0


class DockerSandbox(
    Sandbox, VerifierPhases, InPlaceGrading, ProcessReclaim, ProcessLogs, ChannelPortForwarding
):
    def __init__(self, config: DockerSandboxConfig) -> None:
        self.config = config
        self._container: Container | None = None
        self._helper: Path | None = None
        self._helper_socket: socket.socket | None = None
        self._helper_mounts: list[Mount] = []
        self._channel: Channel | None = None
        self._default_user = ""
        self._set_home = True
        self._gvisor = False
        self._forks: list[DockerSandbox] = []
        self._next_fork: tuple[bool, asyncio.Future[DockerSandbox]] | None = None
        self._fork_created: asyncio.Future[DockerSandbox] | None = None
        self._main: MainProcess | None = None
        self._main_log: bytes | None = None
        """The entrypoint's output, read just before the container is removed."""

    @property
    def container_id(self) -> str:
        if self._container is None:
            raise SandboxError("sandbox is not started")
        return str(self._container.id)

    @property
    def channel(self) -> Channel | None:
        """The command channel once started (None on the ``channel=False`` path)."""
        return self._channel

    @property
    def default_user(self) -> str | None:
        """Who runs a command that names no user: the image's ``USER`` (None: root)."""
        return self._default_user or None

    async def start(self) -> None:
        if self._container is None:
            await self.create()
        assert self._container is not None
        try:
            await asyncio.to_thread(self._container.start)
        except (docker.errors.DockerException, SandboxError) as exc:
            self._close_helper_socket()
            with contextlib.suppress(docker.errors.DockerException):
                await asyncio.to_thread(self._container.remove, force=True, v=True)
            _live.pop(self.container_id, None)
            self._container = None
            raise start_error(exc, f"could not start a container: {exc}") from exc
        if self._helper_socket is not None:
            await self._connect_channel(self._helper_socket)
        await self._start_main_process()
        network = self.config.clean_room_network
        if network is not None and self._creates_fork_ahead():
            self._fork_created = asyncio.ensure_future(self._create_fork(network))

    def _creates_fork_ahead(self) -> bool:
        """Whether a clean room can be created ahead (not beside sidecars: see environment.py;
        not when this container can be its own clean room, ``restart_clean``)."""
        return not self.grades_in_place()

    def grades_in_place(self) -> bool:
        """The helper comes from a read-only bind mount, so the one a restart starts is
        envfarm's whatever the agent wrote; no process of the image's own runs (a sweep would
        kill it, a restart start it again from the agent's files)."""
        if not self.config.restart_clean_room or self._channel is None:
            return False
        return bool(self._helper_mounts) and self._main is None

    async def restart_clean(self, *, network: bool) -> None:
        """Kill the container and start it again: a fresh init and helper, the same file
        system, its tmpfs mounts empty; the network changed while nothing runs."""
        if self._container is None or self._helper is None:
            raise SandboxError("sandbox is not started")
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        await asyncio.to_thread(kill_container, self._container)
        await self._switch_network(network)
        attach = functools.partial(attach_helper, upload=False, gvisor=self._gvisor)
        try:
            self._helper_socket = (
                await asyncio.to_thread(attach, self._container, self._helper)
            ).sock
            await asyncio.to_thread(self._container.start)
        except (docker.errors.DockerException, SandboxError) as exc:
            self._close_helper_socket()
            raise start_error(exc, f"could not restart the container: {exc}") from exc
        await self._connect_channel(self._helper_socket)
        await self._restarted()

    async def _restarted(self) -> None:
        """What a restarted main container needs before grading (none here)."""

    async def end_processes(self, *, since: float) -> Swept | str:
        """The helper's sweep (it is this container's init), where it stands for a restart."""
        try:
            return await sweep_in_place(self._require_channel(), self.config, since)
        except SandboxGone as exc:
            await self._explain_gone(exc)

    async def _switch_network(self, network: bool) -> bool:
        """Join or leave the default bridge (leaving ``none`` first, for a container created
        there); whether it changed."""
        if network == self.config.network:
            return False
        await asyncio.to_thread(switch_default_bridge_from_none, self.container_id, network)
        self.config = self.config.model_copy(update={"network": network})
        return True

    async def walk_files(self) -> bytes:
        return await self._require_channel().listing("/", f"{HELPER_DIR}/walk-{uuid.uuid4().hex}")

    async def remove_files(self, paths: list[str], *, contents: Sequence[str] = ()) -> None:
        await self._require_channel().remove(paths, contents)

    def _require_channel(self) -> Channel:
        if self._channel is None:
            raise SandboxError("the sandbox has no helper channel")
        return self._channel

    async def create(self) -> None:
        """Create the container, helper attached, without starting it."""
        try:
            self._gvisor = await asyncio.to_thread(is_gvisor, self.config.runtime)
        except EnvironmentUnsupported:
            raise
        except SandboxError as exc:
            raise SandboxStartError(f"could not start a container: {exc}") from exc
        if self.config.channel or self._gvisor:  # gVisor: for the helper's companions
            self._helper = await ensure_helper()
        try:
            if self._helper is not None:
                self._helper_mounts = await asyncio.to_thread(
                    functools.partial(
                        helper_mounts, self._helper, self.config.image, gvisor=self._gvisor
                    )
                )
            self._container = await asyncio.to_thread(self._create_container)
        except docker.errors.ImageNotFound as exc:
            self._close_helper_socket()
            raise SandboxStartError(f"image {self.config.image!r} does not exist") from exc
        except (docker.errors.DockerException, SandboxError) as exc:
            self._close_helper_socket()
            raise start_error(exc, f"could not start a container: {exc}") from exc

    async def _start_main_process(self) -> None:
        if self._channel is None:
            return
        assert self._container is not None
        image_id = str(self._container.attrs.get("Image") or self.config.image)
        config = await image_config(image_id, self.config.image)
        argv = main_argv(config, self.config.entrypoint, self.config.command)
        if argv is None:
            return
        self._main = MainProcess(
            self._channel, argv, user=self._default_user, set_home=self._set_home
        )
        await self._main.start()

    async def process_logs(self) -> dict[str, bytes]:
        """The output of the image's entrypoint: ``main.log`` for this container, then
        ``clean-room-<n>-main.log`` for each fresh container ``fork_clean`` started."""
        logs: dict[str, bytes] = {}
        data = self._main_log
        if self._main is not None and self._container is not None:
            data = await asyncio.to_thread(read_archived, self._container, MAIN_LOG)
        if data is not None:
            logs["main.log"] = data
        for number, fork in enumerate(self._forks, 1):
            for name, data in (await fork.process_logs()).items():
                logs[f"clean-room-{number}-{name}"] = data
        return logs

    async def _connect_channel(self, sock: socket.socket) -> None:
        self._helper_socket = None
        try:
            self._channel = await Channel.connect(sock, name=self.container_id[:12])
            await self._channel.ping()
        except (OSError, SandboxError) as exc:
            sock.close()
            raise SandboxStartError(f"the sandbox helper did not answer: {exc}") from exc

    def _close_helper_socket(self) -> None:
        if self._helper_socket is not None:
            self._helper_socket.close()
            self._helper_socket = None

    def _create_container(self) -> Container:
        """Create, not run: ``containers.run`` would try to pull a missing image."""
        cfg = self.config
        container = create_container(cfg, self._helper_mounts, gvisor=self._gvisor)
        _live[str(container.id)] = container  # here: a create cancelled meanwhile is not lost
        try:
            if cfg.network_name is not None and cfg.network:
                join_default_bridge(container.id or "")
            if self._helper is not None and cfg.channel:
                attached = attach_helper(
                    container, self._helper, upload=not self._helper_mounts, gvisor=self._gvisor
                )
                self._helper_socket, self._default_user, self._set_home = attached
            elif self._helper is not None and not self._helper_mounts:
                upload_helper(container, self._helper, gvisor=self._gvisor)
        except (docker.errors.DockerException, SandboxError):
            container.remove(force=True, v=True)
            _live.pop(str(container.id), None)
            raise
        return container

    async def enter_verifier_phase(self, *, network: bool) -> None:
        """Join or leave the default bridge (an environment network and its sidecars stay as
        they are)."""
        if self._container is not None and await self._switch_network(network) and not network:
            await self._network_taken_away()

    async def _network_taken_away(self) -> None:
        """After leaving the default bridge: nothing more without an environment network."""

    async def exec(
        self,
        command: str,
        *,
        timeout: float | None = None,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
    ) -> ExecResult:
        if self._channel is None:
            return await self._engine().exec(command, timeout, workdir, env or {}, user or "")
        started = time.monotonic()
        try:
            outcome = await self._channel.exec(
                command,
                cwd=workdir,
                env=env,
                user=user or self._default_user,
                set_home=self._set_home,
                timeout=timeout,
                output_cap=self.config.output_cap,
            )
        except SandboxGone as exc:
            await self._explain_gone(exc)
        return ExecResult(
            exit_code=outcome.docker_exit_code(),
            stdout=outcome.stdout.decode(errors="replace"),
            stderr=outcome.stderr.decode(errors="replace"),
            timed_out=outcome.timed_out,
            duration_s=time.monotonic() - started,
        )

    def _engine(self) -> dockerexec.EnginePath:
        assert self._container is not None
        return dockerexec.EnginePath(
            self._container,
            self.config.output_cap,
            self._raise_if_gone,
            files_by_command=self._gvisor,
        )

    async def _explain_gone(self, exc: SandboxGone) -> NoReturn:
        """The channel ended: say why, from the container's state once the engine knows it."""
        deadline = time.monotonic() + GONE_SETTLE_S
        while time.monotonic() < deadline:
            await self._raise_if_gone(exc)
            await asyncio.sleep(0.05)
        raise exc

    async def _raise_if_gone(self, exc: Exception) -> None:
        assert self._container is not None
        helper = HELPER_PATH if self._channel else None
        gone = await asyncio.to_thread(gone_error, self._container, helper)
        if gone is not None:
            raise gone from exc

    async def read_file(self, path: str, *, user: str | None = None) -> bytes:
        """``user``: read with that user's permissions (default root)."""
        if self._channel is not None:
            try:
                return await self._channel.read_file(path, user=user)
            except SandboxGone as exc:
                await self._explain_gone(exc)
        return await self._engine().read_file(path, user)

    async def write_file(
        self, path: str, data: bytes, mode: int = 0o644, *, user: str | None = None
    ) -> None:
        """Atomic through the channel (temporary file + rename); ``user`` as for read_file."""
        if not path.startswith("/"):
            raise ValueError(f"sandbox paths must be absolute, got {path!r}")
        if self._channel is None:
            await self._engine().write_file(path, data, mode, user)
            return
        try:
            await self._channel.write_file(path, data, mode=mode, user=user)
        except SandboxGone as exc:
            await self._explain_gone(exc)

    async def reclaim_processes(self) -> int:
        if self._channel is None:
            return 0
        try:
            return await self._channel.reclaim_processes(PIDS_RESERVE)
        except SandboxGone as exc:
            await self._explain_gone(exc)

    async def prepare_fork(self, *, network: bool) -> None:
        """Create and start the fresh container now, while the agent's is still inspected:
        it runs only the helper until ``fork_clean`` has killed this one."""
        if self._container is None or self._next_fork is not None:
            return
        self._next_fork = (network, asyncio.ensure_future(self._start_fork(network)))

    def shared_paths(self) -> list[str]:
        """The ``volume:/path[:mode]`` volumes: a fork mounts the same ones."""
        return [spec.split(":")[1] for spec in self.config.volumes if spec.count(":") >= 1]

    async def _create_fork(self, network: bool) -> DockerSandbox:
        update = {"network": network, "verifier_network": None, "clean_room_network": None}
        clean = DockerSandbox(self.config.model_copy(update=update))
        self._forks.append(clean)
        await clean.create()
        return clean

    async def _start_fork(self, network: bool) -> DockerSandbox:
        created, self._fork_created = self._fork_created, None
        clean: DockerSandbox | None = None
        if created is not None:
            with contextlib.suppress(SandboxError):  # not created: one is created now
                clean = await created
        if clean is None or clean.config.network != network:  # another one: removed later
            clean = await self._create_fork(network)
        await clean.start()
        await self._prepare_fork(clean)
        return clean

    async def fork_clean(self, *, network: bool) -> Sandbox:
        """Kill this container (it stays until teardown), then hand out a fresh one of the same
        configuration (image, limits, aliases, volumes) with ``network``: the one
        ``prepare_fork`` started (finishing its start during the kill), or one started now."""
        if self._container is None:
            raise SandboxError("sandbox is not started")
        if self._channel is not None:
            self._channel.close()
        pending, self._next_fork = self._next_fork, None
        if pending is not None and pending[0] != network:  # not the one asked for: removed later
            await asyncio.gather(pending[1], return_exceptions=True)
            pending = None
        if pending is None:
            await asyncio.to_thread(kill_container, self._container)
            return await self._start_fork(network)
        killed = asyncio.ensure_future(asyncio.to_thread(kill_container, self._container))
        # the prepared container finishes starting while this one is killed; handed out after
        kill_outcome, fork_outcome = await asyncio.gather(
            killed, pending[1], return_exceptions=True
        )
        for outcome in (kill_outcome, fork_outcome):
            if isinstance(outcome, BaseException):
                raise outcome
        assert isinstance(fork_outcome, DockerSandbox)
        return fork_outcome

    async def _prepare_fork(self, clean: DockerSandbox) -> None:
        """What a fresh main container needs before it runs anything (none here)."""

    async def _teardown(self) -> None:
        pending, self._next_fork = self._next_fork, None
        created, self._fork_created = self._fork_created, None
        waits = [f for f in (pending and pending[1], created) if f is not None]
        await asyncio.gather(*waits, return_exceptions=True)
        forks, self._forks = self._forks, []
        outcomes = await asyncio.gather(
            self._remove_container(), *(f.stop() for f in forks), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _remove_container(self) -> None:
        if self._container is None:
            return
        if self._main is not None:  # a fork's log outlives its container, for the artifacts
            self._main_log = await asyncio.to_thread(read_archived, self._container, MAIN_LOG)
        container, self._container = self._container, None
        self._close_helper_socket()
        if self._channel is not None:
            self._channel.close()
        try:
            await asyncio.to_thread(container.remove, force=True, v=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.DockerException as exc:
            raise SandboxError(f"could not remove container {container.short_id}: {exc}") from exc
        finally:
            _live.pop(str(container.id), None)
