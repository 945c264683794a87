"""The image's own process, started as Harbor's compose starts the ``main`` service.

Harbor runs ``main`` with the image's ``ENTRYPOINT`` and, in place of its ``CMD``, the compose
``command`` (by default Harbor's idle ``sh -c "sleep infinity"``). envfarm's container runs its
helper instead, so the helper starts that argv as a supervised child once the channel is up:
``ENTRYPOINT`` + command, or the command alone when it is not the idle one; nothing when the
image has no entrypoint and the command is idle. It runs as the image's ``USER`` in the
container's working directory and environment, its output appended to ``MAIN_LOG`` in the
container (never onto the helper's stream), which ``process_logs`` hands to the artifacts.

Exiting with a non-zero status (or by a signal) within ``START_GRACE_S`` of the start is a
``SandboxStartError`` naming the command and quoting the log's tail: the entrypoint failed, as
``docker compose up`` would show. Exiting 0 is fine (a setup script that returns).
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from typing import Any

import docker.errors

from envfarm.errors import EnvfarmError, SandboxStartError
from envfarm.sandbox.channel.answers import ExecOutcome
from envfarm.sandbox.channel.client import Channel
from envfarm.sandbox.docker.client import image_config as inspect_image_config
from envfarm.sandbox.docker.sandbox_config import DockerSandboxConfig

IDLE_COMMAND = ("sh", "-c", "sleep infinity")
MAIN_LOG = "/.envfarm/main.log"
START_GRACE_S = 1.0
TAIL_CHARS = 2000


async def image_config(image_id: str, name: str) -> dict[str, Any]:
    """The ``Config`` of the image ``image_id`` (``name``: how the task calls it)."""
    try:
        return await asyncio.to_thread(inspect_image_config, image_id)
    except docker.errors.DockerException as exc:
        raise SandboxStartError(f"cannot inspect image {name!r}: {exc}") from exc


def main_argv(
    image_config: dict[str, Any], entrypoint: list[str] | None, command: list[str] | None
) -> list[str] | None:
    """The argv to start, or None. ``entrypoint`` None: the image's; ``command`` None: idle."""
    entry = list(image_config.get("Entrypoint") or []) if entrypoint is None else entrypoint
    args = list(IDLE_COMMAND) if command is None else command
    if not entry and tuple(args) == IDLE_COMMAND:
        return None
    argv = entry + args
    return argv or None


async def configured_argv(config: DockerSandboxConfig, image_id: str) -> list[str] | None:
    """The argv of the image's own process in a sandbox of ``config`` run from ``image_id``."""
    image = await image_config(image_id, config.image)
    return main_argv(image, config.entrypoint, config.command)


class MainProcess:
    """One started argv; ``outcome`` once it has exited (None while it runs)."""

    def __init__(self, channel: Channel, argv: list[str], *, user: str, set_home: bool) -> None:
        self.argv = argv
        self._channel = channel
        self._user = user
        self._set_home = set_home
        self._task: asyncio.Task[ExecOutcome] | None = None

    async def start(self, grace_s: float = START_GRACE_S) -> None:
        self._task = asyncio.create_task(
            self._channel.exec(
                self.argv, user=self._user, set_home=self._set_home, output_cap=0, log=MAIN_LOG
            )
        )
        self._task.add_done_callback(_retrieve)
        done, _ = await asyncio.wait({self._task}, timeout=grace_s)
        if not done:
            return
        try:
            outcome = self._task.result()
        except EnvfarmError as exc:
            raise SandboxStartError(f"could not start {self.shown}: {exc}") from exc
        if outcome.exit_code != 0:
            status = (
                f"exit code {outcome.exit_code}"
                if outcome.exit_code is not None
                else f"signal {outcome.signal}"
            )
            raise SandboxStartError(
                f"the image's entrypoint {self.shown} ended at start with {status}; its output "
                f"ends with:\n{await self.log_tail()}"
            )

    @property
    def shown(self) -> str:
        return shlex.join(self.argv)

    async def log_tail(self) -> str:
        with contextlib.suppress(EnvfarmError, OSError):
            text = (await self._channel.read_file(MAIN_LOG)).decode(errors="replace")
            return text[-TAIL_CHARS:] or "(nothing)"
        return "(its log could not be read)"


def _retrieve(task: asyncio.Task[ExecOutcome]) -> None:
    if not task.cancelled():
        task.exception()
