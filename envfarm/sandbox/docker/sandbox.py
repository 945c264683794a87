"""Docker backend of the ``Sandbox`` interface: one container, and what grading asks of it.

Hardened by default for untrusted model code: no network unless asked, every capability dropped
but the few a root package install needs, no-new-privileges, memory (= memory+swap), CPU, pids
limits, an init that reaps zombies (the helper, or ``--init``). The container itself, its helper
and the channel to it are ``container.py``'s; this module is what the episode sees of them.

A task whose verifier phase has other network access than its agent phase gets the default
bridge joined or left by ``enter_verifier_phase``. Memory limits keep the helper alive when the
agent's commands exceed them (``excess.py``).

The image's ``ENTRYPOINT`` (with the compose ``command``) runs as Harbor runs it, as a child of
the helper whose output goes to a log file (``mainprocess.py``); ``process_logs`` reads it.
For clean-room grading ``end_processes`` has the helper kill every other process, or
``restart_clean`` kills and restarts the container (grading/cleanroom/inplace.py);
``fresh_verifier`` kills it, keeping it until teardown, and hands out a fresh one of the same
configuration (``cleanrooms.py``). Teardown removes the container and its clean rooms at once.

In a compose environment this sandbox is the main container, held by ``DockerEnvironment``
(``environment.py``), which settles it and each of its clean rooms into the environment.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence

from envfarm.errors import SandboxError, SandboxGone
from envfarm.sandbox.base import (
    ExecResult,
    InPlaceGrading,
    ProcessLogs,
    ProcessReclaim,
    Sandbox,
    Swept,
    VerifierImage,
    VerifierPhases,
)
from envfarm.sandbox.channel.client import Channel
from envfarm.sandbox.channel.relay import ChannelPortForwarding
from envfarm.sandbox.docker.cleanrooms import CleanRooms
from envfarm.sandbox.docker.container import SandboxContainer
from envfarm.sandbox.docker.excess import PIDS_RESERVE
from envfarm.sandbox.docker.mainprocess import MAIN_LOG, MainProcess, configured_argv
from envfarm.sandbox.docker.sandbox_config import DockerSandboxConfig as DockerSandboxConfig
from envfarm.sandbox.docker.sandboxd import HELPER_DIR
from envfarm.sandbox.docker.sweep import sweep_in_place
from envfarm.sandbox.docker.verifier_image import verifier_image_tag


class DockerSandbox(
    Sandbox, VerifierPhases, InPlaceGrading, ProcessReclaim, ProcessLogs, ChannelPortForwarding
):
    def __init__(
        self,
        config: DockerSandboxConfig,
        *,
        settle: Callable[[DockerSandbox], Awaitable[None]] | None = None,
    ) -> None:
        """``settle``: what the environment around this container does to each clean room
        before it is handed out (a compose environment's bind files and route)."""
        self._container = SandboxContainer(config)
        self._clean_rooms: CleanRooms[DockerSandbox] = CleanRooms(DockerSandbox, settle)
        self._main: MainProcess | None = None
        self._main_log: bytes | None = None
        """The entrypoint's output, read just before the container is removed."""

    @property
    def config(self) -> DockerSandboxConfig:
        return self._container.config

    @property
    def container_id(self) -> str:
        return self._container.id

    @property
    def channel(self) -> Channel | None:
        """The command channel once started (None on the ``channel=False`` path)."""
        return self._container.channel

    @property
    def default_user(self) -> str | None:
        """Who runs a command that names no user: the image's ``USER`` (None: root)."""
        return self._container.default_user or None

    @property
    def gvisor(self) -> bool:
        """Whether the container runs under gVisor (known once created)."""
        return self._container.gvisor

    @property
    def drops_own_route(self) -> bool:  # at each start of the container (``create.py``)
        return self._container.drops_route

    async def create(self) -> None:
        """Create the container, helper attached, without starting it."""
        await self._container.create()

    async def start(self) -> None:
        await self._container.start()
        await self._start_main_process()
        network = self.config.clean_room_network
        if network is not None and not self.grades_in_place():  # else it is its own
            self._clean_rooms.create_ahead(self.config, network)

    async def _start_main_process(self) -> None:
        channel = self._container.channel
        if channel is None:
            return
        argv = await configured_argv(self.config, self._container.image_id)
        if argv is None:
            return
        user, set_home = self._container.default_user, self._container.set_home
        self._main = MainProcess(channel, argv, user=user, set_home=set_home)
        await self._main.start()

    def grades_in_place(self) -> bool:
        """The helper comes from a read-only bind mount, so the one a restart starts is
        envfarm's whatever the agent wrote; no process of the image's own runs (a sweep would
        kill it, a restart start it again from the agent's files)."""
        if not self.config.restart_clean_room or self.channel is None:
            return False
        return bool(self._container.helper_mounts) and self._main is None

    async def restart_clean(self, *, network: bool) -> None:
        """Kill the container and start it again: a fresh init and helper, the same file
        system, its tmpfs mounts empty; the network changed while nothing runs."""
        await self._container.restart(network=network)

    async def end_processes(self, *, since: float) -> Swept | str:
        """The helper's sweep (it is this container's init), where it stands for a restart."""
        try:
            return await sweep_in_place(self._container.require_channel(), self.config, since)
        except SandboxGone as exc:
            await self._container.explain_gone(exc)

    async def walk_files(self) -> bytes:
        where = "/tmp/.envfarm-" if self._container.workstation else f"{HELPER_DIR}/"
        scratch = f"{where}walk-{uuid.uuid4().hex}"
        return await self._container.require_channel().listing("/", scratch)

    async def remove_files(self, paths: list[str], *, contents: Sequence[str] = ()) -> None:
        await self._container.require_channel().remove(paths, contents)

    async def enter_verifier_phase(self, *, network: bool) -> None:
        """Join or leave the default bridge (an environment network and its sidecars stay as
        they are)."""
        await self.switch_network(network)

    async def switch_network(self, network: bool) -> bool:
        """Join or leave the default bridge once started; whether it changed."""
        return self._container.container is not None and await self._container.switch_network(
            network
        )

    async def exec(
        self,
        command: str,
        *,
        timeout: float | None = None,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
    ) -> ExecResult:
        channel = self._container.channel
        if channel is None:
            engine = self._container.engine()
            return await engine.exec(command, timeout, workdir, env or {}, user or "")
        started = time.monotonic()
        try:
            outcome = await channel.exec(
                command,
                cwd=workdir,
                env=env,
                user=user or self._container.default_user,
                set_home=self._container.set_home,
                timeout=timeout,
                output_cap=self.config.output_cap,
            )
        except SandboxGone as exc:
            await self._container.explain_gone(exc)
        return ExecResult(
            exit_code=outcome.docker_exit_code(),
            stdout=outcome.stdout.decode(errors="replace"),
            stderr=outcome.stderr.decode(errors="replace"),
            timed_out=outcome.timed_out,
            duration_s=time.monotonic() - started,
        )

    async def read_file(self, path: str, *, user: str | None = None) -> bytes:
        """``user``: read with that user's permissions (default root)."""
        channel = self._container.channel
        if channel is not None:
            try:
                return await channel.read_file(path, user=user)
            except SandboxGone as exc:
                await self._container.explain_gone(exc)
        return await self._container.engine().read_file(path, user)

    async def write_file(
        self, path: str, data: bytes, mode: int = 0o644, *, user: str | None = None
    ) -> None:
        """Atomic through the channel (temporary file + rename); ``user`` as for read_file."""
        if not path.startswith("/"):
            raise ValueError(f"sandbox paths must be absolute, got {path!r}")
        channel = self._container.channel
        if channel is None:
            await self._container.engine().write_file(path, data, mode, user)
            return
        try:
            await channel.write_file(path, data, mode=mode, user=user)
        except SandboxGone as exc:
            await self._container.explain_gone(exc)

    async def reclaim_processes(self) -> int:
        channel = self._container.channel
        if channel is None:
            return 0
        try:
            return await channel.reclaim_processes(PIDS_RESERVE)
        except SandboxGone as exc:
            await self._container.explain_gone(exc)

    async def free_disk_reserve(self) -> None:
        channel = self._container.channel
        if channel is None:
            return
        try:
            await channel.free_reserve()
        except SandboxGone as exc:
            await self._container.explain_gone(exc)

    async def process_logs(self) -> dict[str, bytes]:
        """The output of the image's entrypoint: ``main.log`` for this container, then
        ``clean-room-<n>-main.log`` for each fresh container ``fresh_verifier`` started."""
        logs: dict[str, bytes] = {}
        data = self._main_log
        if self._main is not None and self._container.container is not None:
            data = await self._container.read_archived(MAIN_LOG)
        if data is not None:
            logs["main.log"] = data
        for number, room in enumerate(self._clean_rooms.made, 1):
            for name, data in (await room.process_logs()).items():
                logs[f"clean-room-{number}-{name}"] = data
        return logs

    async def prepare_fresh_verifier(self, *, network: bool) -> None:
        """Create and start the fresh container now, while the agent's is still inspected:
        it runs only the helper until ``fresh_verifier`` has killed this one."""
        if self._container.container is not None:
            self._clean_rooms.prepare(self.config, network)

    def shared_paths(self) -> list[str]:
        """The ``volume:/path[:mode]`` volumes: a fresh verifier mounts the same ones."""
        return [spec.split(":")[1] for spec in self.config.volumes if spec.count(":") >= 1]

    async def fresh_verifier(self, *, network: bool, image: VerifierImage | None = None) -> Sandbox:
        """Kill this container (it stays until teardown), then hand out a fresh one of the same
        configuration (image, limits, aliases, volumes) with ``network``: the one
        ``prepare_fresh_verifier`` started (finishing its start during the kill), or one started
        now. With ``image``, of that image (built first: ``verifier_image.py``)."""
        if self._container.container is None:
            raise SandboxError("sandbox is not started")
        config = self.config
        if image is not None:
            config = config.model_copy(update={"image": await verifier_image_tag(image)})
        if self._container.channel is not None:
            self._container.channel.close()
        return await self._clean_rooms.hand_out(config, network, self._container.kill)

    @property
    def runs_own_process(self) -> bool:
        """Whether a process of the image's own (its ``ENTRYPOINT``, a compose ``command``)
        was started in the container."""
        return self._main is not None

    async def kill_now(self) -> None:
        """Stop every process of the container now, its channel closed; it stays until
        teardown (a warm environment is frozen so, ``fork.py``)."""
        if self._container.channel is not None:
            self._container.channel.close()
        await self._container.kill()

    async def _teardown(self) -> None:
        rooms = await self._clean_rooms.drain()
        outcomes = await asyncio.gather(
            self._remove_container(), *(room.stop() for room in rooms), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _remove_container(self) -> None:
        if self._main is not None and self._container.container is not None:
            # a clean room's log outlives its container, for the artifacts
            self._main_log = await self._container.read_archived(MAIN_LOG)
        await self._container.remove()
