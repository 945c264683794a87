"""Container runtimes as the engine has them registered: runc (Docker's default) and gVisor.

A runtime is gVisor when the program it is registered with is ``runsc``, whatever its name.
The planner (``envfarm/plan/planner.py``) chooses each episode's runtime from what these
report: the job's or the run's, or for a task that asks for gVisor itself
(``[environment] runtime = "gvisor"``) a registered gVisor runtime (``runsc`` first).

gVisor as Debian ships it (release 20221219) differs from runc in ways envfarm handles here,
in ``sandboxd.py`` and in the helper (docs/sandbox.md has the list):

- Registered with ``--network=none`` (as ``scripts/setup`` does), it gives a container only
  loopback, whatever Docker networks the container joins: a task that needs the network in
  either phase, or that has sidecars, is refused when its episodes are planned. A gVisor
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


def gvisor_runtime() -> str | None:
    """The registered gVisor runtime a task that asks for gVisor runs under (``runsc``
    first); None when the engine has none."""
    found = sorted(
        (r.name for r in registered_runtimes().values() if r.gvisor),
        key=lambda name: (name != GVISOR_PROGRAM, name),
    )
    return found[0] if found else None
