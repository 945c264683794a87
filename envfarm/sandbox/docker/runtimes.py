"""Container runtimes as the engine has them registered: runc (Docker's default) and gVisor.

A runtime is gVisor when the program it is registered with is ``runsc``, whatever its name.
A run picks one runtime for every task (``envfarm run --runtime NAME``); a task that asks for
gVisor itself (``[environment] runtime = "gvisor"``) gets the run's runtime when that is gVisor,
else a registered gVisor runtime (``runsc`` first), else a clear error.

gVisor as Debian ships it (release 20221219) differs from runc in ways envfarm handles here,
in ``sandboxd.py`` and in the helper (docs/sandbox.md has the list):

- Registered with ``--network=none`` (as ``scripts/setup`` does), it gives a container only
  loopback, whatever Docker networks the container joins: a task that needs the network in
  either phase, or that has sidecars, is refused before any episode (``check_task``). A gVisor
  runtime registered with its own network stack is accepted for network tasks, except for a
  network that changes between phases (gVisor sees only the interfaces present at start).
- Its ``statx`` rejects ``AT_NO_AUTOMOUNT``, so coreutils' ``ls`` and ``stat`` fail on every
  path: sandboxes under gVisor preload a small library that drops the flag.
- It lacks ``setfsuid``: the helper switches its effective ids for file access instead.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import PurePosixPath

import docker.errors
import requests

from envfarm.errors import EnvironmentUnsupported, SandboxError
from envfarm.sandbox.docker.client import docker_client
from envfarm.spec.task import Task

GVISOR_PROGRAM = "runsc"


@dataclass(frozen=True)
class Runtime:
    name: str
    program: str
    args: tuple[str, ...] = ()

    @property
    def gvisor(self) -> bool:
        return PurePosixPath(self.program).name == GVISOR_PROGRAM

    @property
    def networked(self) -> bool:
        """Whether a container under it can have interfaces other than loopback."""
        return not (self.gvisor and _network_none(self.args))


def _network_none(args: tuple[str, ...]) -> bool:
    for index, arg in enumerate(args):
        flag, _, value = arg.lstrip("-").partition("=")
        if flag == "network":
            value = value or (args[index + 1] if index + 1 < len(args) else "")
            if value == "none":
                return True
    return False


@functools.cache
def registered_runtimes() -> dict[str, Runtime]:
    """Blocking; asked of the engine once per process."""
    try:
        info = docker_client().info()
    except (docker.errors.DockerException, requests.RequestException) as exc:
        raise SandboxError(f"could not ask the Docker engine for its runtimes: {exc}") from exc
    runtimes = {}
    for name, entry in (info.get("Runtimes") or {}).items():
        args = tuple(str(arg) for arg in entry.get("runtimeArgs") or ())
        runtimes[name] = Runtime(name, str(entry.get("path") or name), args)
    return runtimes


def runtime(name: str) -> Runtime:
    """The registered runtime ``name``; EnvironmentUnsupported naming the others if none."""
    runtimes = registered_runtimes()
    if name not in runtimes:
        raise EnvironmentUnsupported(
            f"the Docker engine has no runtime {name!r} (registered: "
            f"{', '.join(sorted(runtimes)) or 'none'}); register it in the engine's "
            "daemon.json (scripts/setup registers gVisor as 'runsc') or pick another"
        )
    return runtimes[name]


def is_gvisor(name: str | None) -> bool:
    return name is not None and runtime(name).gvisor


def choose_runtime(task: Task, default: str | None) -> str | None:
    """The runtime an episode of ``task`` runs under: ``default`` (the run's choice; None is
    the engine's default) unless the task asks for gVisor and ``default`` is not gVisor."""
    if task.config.environment.runtime != "gvisor" or is_gvisor(default):
        return default
    found = sorted(
        (r.name for r in registered_runtimes().values() if r.gvisor),
        key=lambda name: (name != GVISOR_PROGRAM, name),
    )
    if not found:
        raise EnvironmentUnsupported(
            f"task {task.id}: [environment] runtime = 'gvisor', but the Docker engine has no "
            f"runtime running {GVISOR_PROGRAM} (apt-get install runsc, then register it in "
            "daemon.json as scripts/setup does)"
        )
    return found[0]


def check_task(task: Task, name: str | None) -> None:
    """Refuse a task that needs what runtime ``name`` cannot give (blocking)."""
    if name is None:
        return
    chosen = runtime(name)
    if not chosen.gvisor:
        return
    config = task.config
    # what the task asks for; Harbor's default network for an unset verifier is not a need
    verifier = config.verifier_network_set() is True
    modes = (("agent", config.agent_network()), ("verifier", verifier))
    phases = [phase for phase, public in modes if public]
    sidecars = sorted(task.compose.sidecars) if task.compose is not None else []
    where = f"task {task.id}: runtime {name!r} (gVisor)"
    if not chosen.networked and (phases or sidecars):
        needs = (
            f"network_mode 'public' in the {' and '.join(phases)} phase{'s' * (len(phases) > 1)}"
            if phases
            else f"its services ({', '.join(sidecars)}) on the environment network"
        )
        raise EnvironmentUnsupported(
            f"{where} is registered with --network=none, so its containers have no network "
            f"but loopback, and the task needs {needs}; run it without gVisor, or register "
            "another gVisor runtime without --network=none"
        )
    if len(phases) == 1:
        raise EnvironmentUnsupported(
            f"{where}: the network changes between the agent and the verifier phase, and a "
            "gVisor sandbox keeps the interfaces it started with; give both phases the same "
            "network_mode, or run the task without gVisor"
        )
