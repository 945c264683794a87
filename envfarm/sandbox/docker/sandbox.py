"""Docker backend of the ``Sandbox`` interface.

Hardened by default for untrusted model code: no network unless asked, every capability dropped
but the few a root package install needs, no-new-privileges, memory (= memory+swap), CPU, pids
limits, ``--init`` to reap zombies. Every container carries envfarm's labels and
the owner's host and pid, so ``reap_orphans`` can remove what a killed run left behind; live
containers are also tracked in-process and force-removed at interpreter exit.

Commands and files go through a persistent channel, not a ``docker exec`` per call: the main
process (under docker-init) is the static helper ``sandboxd`` (``sandboxd.py`` builds and
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
``fork_clean`` (clean-room grading) kills the container, keeping it until teardown, and hands
out a fresh one of the same configuration, started by ``prepare_fork`` as the agent stopped
(it runs nothing but the helper until then). Teardown removes the container and its forks at
once: each removal is the engine deleting a file system (about a second here), and nothing
orders them.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import socket
import time
from pathlib import Path
from typing import Any, NoReturn

import docker
import docker.errors
from docker.models.containers import Container
from docker.types import LogConfig, Mount

from envfarm.errors import EnvironmentUnsupported, SandboxError, SandboxGone, SandboxStartError
from envfarm.sandbox.base import ExecResult, ProcessLogs, ProcessReclaim, Sandbox, VerifierPhases
from envfarm.sandbox.channel.client import Channel
from envfarm.sandbox.channel.relay import ChannelPortForwarding
from envfarm.sandbox.docker import dockerexec
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.containers import kill_container, read_archived
from envfarm.sandbox.docker.excess import PIDS_RESERVE, VERIFIER_TMPFS, limits_and_helper
from envfarm.sandbox.docker.labels import (
    LABEL_KIND,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_RUN,
    LABEL_TASK,
    owner_label,
)
from envfarm.sandbox.docker.limits import start_error
from envfarm.sandbox.docker.mainprocess import MAIN_LOG, MainProcess, main_argv
from envfarm.sandbox.docker.networks import (
    join_default_bridge,
    leave_default_bridge,
    network_options,
    switch_default_bridge,
)
from envfarm.sandbox.docker.runtimes import is_gvisor
from envfarm.sandbox.docker.sandbox_config import DockerSandboxConfig as DockerSandboxConfig
from envfarm.sandbox.docker.sandboxd import (
    HELPER_PATH,
    attach_helper,
    ensure_helper,
    helper_mounts,
    upload_helper,
)
from envfarm.sandbox.docker.storage import storage_options

GONE_SETTLE_S = 2.0


_live: dict[str, Container] = {}
_image_configs: dict[str, dict[str, Any]] = {}
"""Image id (content-addressed) -> its ``Config``, read once per process."""


def _remove_live_containers() -> None:
    for container in list(_live.values()):
        with contextlib.suppress(docker.errors.DockerException):
            container.remove(force=True, v=True)
    _live.clear()


atexit.register(_remove_live_containers)


class DockerSandbox(Sandbox, VerifierPhases, ProcessReclaim, ProcessLogs, ChannelPortForwarding):
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
        """Whether a clean room can be created ahead (not beside sidecars: see environment.py)."""
        return True

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
        config = _image_configs.get(image_id)
        if config is None:
            try:
                image = await asyncio.to_thread(docker_client().images.get, image_id)
            except docker.errors.DockerException as exc:
                what = self.config.image
                raise SandboxStartError(f"cannot inspect image {what!r}: {exc}") from exc
            config = _image_configs[image_id] = dict(image.attrs.get("Config") or {})
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
        kwargs: dict[str, Any] = {}
        if cfg.runtime:
            kwargs["runtime"] = cfg.runtime
        if cfg.channel:
            kwargs.update(stdin_open=True, user="0:0", log_config=LogConfig(type="none"))
        kwargs["mounts"] = self._helper_mounts
        probe = {LABEL_MANAGED: "true", LABEL_KIND: "probe", LABEL_OWNER: owner_label()}
        kwargs.update(storage_options(cfg.storage_mb, cfg.image, probe))
        if "storage_opt" in kwargs and cfg.channel:  # room for grading on a full disk
            kwargs["tmpfs"] = VERIFIER_TMPFS
        limits = limits_and_helper(HELPER_PATH, cfg.memory_mb, cfg.pids_limit, gvisor=self._gvisor)
        container = docker_client().containers.create(
            cfg.image,
            command=limits.helper if cfg.channel else ["sleep", "infinity"],
            entrypoint=[],
            init=True,
            hostname="sandbox",
            working_dir=cfg.workdir,
            environment=cfg.env,
            volumes=cfg.volumes,
            **network_options(
                cfg.network or self._network_changes(),
                cfg.network_name,
                cfg.network_aliases,
            ),
            cap_drop=["ALL"],
            cap_add=cfg.cap_add,
            security_opt=["no-new-privileges"],
            mem_limit=f"{limits.memory_mb}m",
            memswap_limit=f"{limits.memory_mb}m",
            nano_cpus=int(cfg.cpus * 1e9),
            pids_limit=limits.pids,
            labels={
                LABEL_MANAGED: "true",
                LABEL_KIND: "sandbox",
                LABEL_RUN: cfg.run_id,
                LABEL_OWNER: owner_label(),
                LABEL_TASK: cfg.task_id,
            },
            **kwargs,
        )
        _live[str(container.id)] = container  # here: a create cancelled meanwhile is not lost
        try:
            if cfg.network_name is not None and cfg.network:
                join_default_bridge(container.id or "")
            elif cfg.network_name is None and self._network_changes() and not cfg.network:
                leave_default_bridge(container.id or "")  # joined at the verifier phase
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

    def _network_changes(self) -> bool:
        cfg = self.config
        return cfg.verifier_network is not None and cfg.verifier_network != cfg.network

    async def enter_verifier_phase(self, *, network: bool) -> None:
        """Join or leave the default bridge (an environment network and its sidecars stay as
        they are)."""
        if self._container is None or network == self.config.network:
            return
        public = network
        await asyncio.to_thread(switch_default_bridge, self.container_id, public)
        self.config = self.config.model_copy(update={"network": public})
        if not public:
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
        try:
            state = await asyncio.to_thread(self._state)
        except docker.errors.NotFound as gone:
            raise SandboxGone("the sandbox container vanished") from gone
        if not state.get("Running", False):
            why = "killed by the kernel's OOM killer" if state.get("OOMKilled") else "exited"
            code = state.get("ExitCode")
            helper = f"; its command helper {HELPER_PATH} ended" if self._channel else ""
            raise SandboxGone(f"the sandbox container {why} (exit code {code}{helper})") from exc

    def _state(self) -> dict[str, Any]:
        assert self._container is not None
        self._container.reload()
        return dict(self._container.attrs["State"])

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
