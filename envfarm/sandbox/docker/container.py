"""One sandbox container on the engine, its init envfarm's helper: created with the helper
attached, started, restarted on the same file system, killed, removed; the channel to the
helper, and why the container ended when the channel does.

Commands and files go through a persistent channel, not a ``docker exec`` per call: the main
process, the container's init, is the static helper ``sandboxd`` (``sandboxd.py`` builds and
provides it, ``sandbox/channel/`` speaks its protocol; docs/sandbox.md), running as root, its stdin
and stdout attached before the container starts: a tool call is one round trip on an open
stream. Its stdout is protocol frames, so the log driver is ``none``. When the helper ends, the
container ends with it and every later call raises ``SandboxGone``. ``channel=False`` keeps
the engine path (``dockerexec.py``) for engines reached over TLS or ssh.

Under gVisor (``runtimes.py``) the helper's compatibility library comes along, and the engine
path moves files through commands. Every container carries envfarm's labels and the owner's host
and pid (``create.py``), so ``reap_orphans`` can remove what a killed run left behind; live
containers are also tracked in-process and force-removed at interpreter exit
(``containers.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import time
from pathlib import Path
from typing import NoReturn

import docker
import docker.errors
from docker.models.containers import Container
from docker.types import Mount

from envfarm.errors import EnvironmentUnsupported, SandboxError, SandboxGone, SandboxStartError
from envfarm.sandbox.channel.client import Channel
from envfarm.sandbox.docker import dockerexec
from envfarm.sandbox.docker.containers import gone_error, kill_container, read_archived
from envfarm.sandbox.docker.containers import live_containers as _live
from envfarm.sandbox.docker.create import create_container, helper_drops_route
from envfarm.sandbox.docker.limits import start_error
from envfarm.sandbox.docker.networks import join_default_bridge, switch_default_bridge_from_none
from envfarm.sandbox.docker.runtimes import is_gvisor
from envfarm.sandbox.docker.sandbox_config import DockerSandboxConfig
from envfarm.sandbox.docker.sandboxd import (
    HELPER_PATH,
    attach_helper,
    ensure_helper,
    helper_mounts,
    upload_helper,
)
from envfarm.sandbox.docker.workstation import INIT_PATH, meminfo_mount

GONE_SETTLE_S = 2.0


class SandboxContainer:
    """One container of ``config`` (its ``network`` follows the bridge it is on)."""

    def __init__(self, config: DockerSandboxConfig) -> None:
        self.config = config
        self.container: Container | None = None
        """The engine's container from its creation to its removal."""
        self.channel: Channel | None = None
        """The helper's channel once started (None on the ``channel=False`` path)."""
        self.default_user = ""
        """The image's ``USER`` (empty: root), as learnt when the helper was attached."""
        self.set_home = True
        self.gvisor = False
        self.drops_route = False
        """The helper removes the container's default route itself (``create.py``)."""
        self.helper_mounts: list[Mount] = []
        """The helper's read-only bind mounts (none when it was uploaded instead)."""
        self.profile_mounts: list[Mount] = []
        """The workstation profile's (``workstation.py``)."""
        self._helper: Path | None = None
        self._helper_socket: socket.socket | None = None

    @property
    def workstation(self) -> bool:
        """The helper is uploaded to ``INIT_PATH``, never bind-mounted (``workstation.py``)."""
        return self.config.realism == "workstation" and self.config.channel

    @property
    def helper_path(self) -> str:
        return INIT_PATH if self.workstation else HELPER_PATH

    @property
    def id(self) -> str:
        if self.container is None:
            raise SandboxError("sandbox is not started")
        return str(self.container.id)

    @property
    def image_id(self) -> str:
        """The image the container was created from, as the engine names it."""
        assert self.container is not None
        return str(self.container.attrs.get("Image") or self.config.image)

    async def create(self) -> None:
        """Create the container, helper attached, without starting it."""
        try:
            self.gvisor = await asyncio.to_thread(is_gvisor, self.config.runtime)
        except EnvironmentUnsupported:
            raise
        except SandboxError as exc:
            raise SandboxStartError(f"could not start a container: {exc}") from exc
        if self.config.channel or self.gvisor:  # gVisor: for the helper's companions
            self._helper = await ensure_helper()
        try:
            if self._helper is not None:
                mounts = await asyncio.to_thread(
                    functools.partial(
                        helper_mounts, self._helper, self.config.image, gvisor=self.gvisor
                    )
                )
                if not self.workstation:
                    self.helper_mounts = mounts
                elif mounts:  # the engine sees this machine's files
                    found = meminfo_mount(self.config.memory_mb, self._helper.parent)
                    self.profile_mounts = [found] if found is not None else []
            self.container = await asyncio.to_thread(self._create_container)
        except docker.errors.ImageNotFound as exc:
            self._close_helper_socket()
            raise SandboxStartError(f"image {self.config.image!r} does not exist") from exc
        except (docker.errors.DockerException, SandboxError) as exc:
            self._close_helper_socket()
            raise start_error(exc, f"could not start a container: {exc}") from exc

    def _create_container(self) -> Container:
        """Create, not run: ``containers.run`` would try to pull a missing image."""
        cfg = self.config
        mounts = [*self.helper_mounts, *self.profile_mounts]
        self.drops_route = helper_drops_route(cfg, gvisor=self.gvisor)
        container = create_container(cfg, mounts, gvisor=self.gvisor, drops_route=self.drops_route)
        _live[str(container.id)] = container  # here: a create cancelled meanwhile is not lost
        try:
            if cfg.network_name is not None and cfg.network:
                join_default_bridge(container.id or "")
            if self._helper is not None and cfg.channel:
                attached = attach_helper(
                    container,
                    self._helper,
                    upload=not self.helper_mounts,
                    gvisor=self.gvisor,
                    workstation=self.workstation,
                )
                self._helper_socket, self.default_user, self.set_home = attached
            elif self._helper is not None and not self.helper_mounts:
                upload_helper(
                    container, self._helper, gvisor=self.gvisor, workstation=self.workstation
                )
        except (docker.errors.DockerException, SandboxError):
            container.remove(force=True, v=True)
            _live.pop(str(container.id), None)
            raise
        return container

    async def start(self) -> None:
        """Start the container (created first if need be) and connect to its helper; on a
        failure the container is removed."""
        if self.container is None:
            await self.create()
        assert self.container is not None
        try:
            await asyncio.to_thread(self.container.start)
        except (docker.errors.DockerException, SandboxError) as exc:
            self._close_helper_socket()
            with contextlib.suppress(docker.errors.DockerException):
                await asyncio.to_thread(self.container.remove, force=True, v=True)
            _live.pop(self.id, None)
            self.container = None
            raise start_error(exc, f"could not start a container: {exc}") from exc
        if self._helper_socket is not None:
            await self._connect_channel(self._helper_socket)

    async def restart(self, *, network: bool) -> None:
        """Kill the container and start it again: a fresh init and helper, the same file
        system, its tmpfs mounts empty; the network changed while nothing runs."""
        if self.container is None or self._helper is None:
            raise SandboxError("sandbox is not started")
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        await asyncio.to_thread(kill_container, self.container)
        await self.switch_network(network)
        attach = functools.partial(attach_helper, upload=False, gvisor=self.gvisor)
        try:
            self._helper_socket = (
                await asyncio.to_thread(attach, self.container, self._helper)
            ).sock
            await asyncio.to_thread(self.container.start)
        except (docker.errors.DockerException, SandboxError) as exc:
            self._close_helper_socket()
            raise start_error(exc, f"could not restart the container: {exc}") from exc
        await self._connect_channel(self._helper_socket)

    async def kill(self) -> None:
        """Stop every process of the container now; it stays until ``remove``."""
        assert self.container is not None
        await asyncio.to_thread(kill_container, self.container)

    async def switch_network(self, network: bool) -> bool:
        """Join or leave the default bridge (leaving ``none`` first, for a container created
        there); whether it changed."""
        if network == self.config.network:
            return False
        await asyncio.to_thread(switch_default_bridge_from_none, self.id, network)
        self.config = self.config.model_copy(update={"network": network})
        return True

    async def read_archived(self, path: str) -> bytes | None:
        """A file of the container, running or stopped, through the engine."""
        assert self.container is not None
        return await asyncio.to_thread(read_archived, self.container, path)

    async def remove(self) -> None:
        if self.container is None:
            return
        container, self.container = self.container, None
        self._close_helper_socket()
        if self.channel is not None:
            self.channel.close()
        try:
            await asyncio.to_thread(container.remove, force=True, v=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.DockerException as exc:
            raise SandboxError(f"could not remove container {container.short_id}: {exc}") from exc
        finally:
            _live.pop(str(container.id), None)

    async def _connect_channel(self, sock: socket.socket) -> None:
        self._helper_socket = None
        try:
            self.channel = await Channel.connect(sock, name=self.id[:12])
            await self.channel.ping()
        except (OSError, SandboxError) as exc:
            sock.close()
            raise SandboxStartError(f"the sandbox helper did not answer: {exc}") from exc

    def _close_helper_socket(self) -> None:
        if self._helper_socket is not None:
            self._helper_socket.close()
            self._helper_socket = None

    def require_channel(self) -> Channel:
        if self.channel is None:
            raise SandboxError("the sandbox has no helper channel")
        return self.channel

    def engine(self) -> dockerexec.EnginePath:
        """The ``docker exec`` and archive path (``channel=False``)."""
        assert self.container is not None
        return dockerexec.EnginePath(
            self.container,
            self.config.output_cap,
            self.raise_if_gone,
            files_by_command=self.gvisor,
        )

    async def explain_gone(self, exc: SandboxGone) -> NoReturn:
        """The channel ended: say why, from the container's state once the engine knows it."""
        deadline = time.monotonic() + GONE_SETTLE_S
        while time.monotonic() < deadline:
            await self.raise_if_gone(exc)
            await asyncio.sleep(0.05)
        raise exc

    async def raise_if_gone(self, exc: Exception) -> None:
        assert self.container is not None
        helper = self.helper_path if self.channel else None
        gone = await asyncio.to_thread(gone_error, self.container, helper)
        if gone is not None:
            raise gone from exc
