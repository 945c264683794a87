"""The workstation profile of a Docker sandbox: a container that looks like a developer's machine.

A model that can tell it runs in a sandbox may behave differently there than in production, so
under ``realism = "workstation"`` (the plan's ``sandbox.realism``) the sandbox hides what says
"container" or "envfarm" to a command run inside it, where runc lets it without privileges
(docs/sandbox.md lists what stays, and why):

- the helper is the container's init as ``/sbin/init`` with no arguments (``INIT_PATH``, put in
  the container by ``put_archive`` before it starts, never a bind mount that ``/proc/mounts``
  would list); its options come by the environment variable ``INIT_OPTS``, which it removes
  from its environment before it starts anything, and ``--hide-container`` removes
  ``/.dockerenv``;
- with ``--dress`` the helper adds a laptop's network interfaces (down, when the container has
  none), ``/dev`` nodes and desktop processes, with ``NET_ADMIN`` and ``MKNOD`` it then gives
  up (``DRESS_CAPS``, ``images/sandboxd/dress.c``);
- a private cgroup namespace (``/proc/self/cgroup`` says ``/``, not ``/docker/<id>``), the
  hostname of a developer's machine (``HOSTNAME``), and the variables a login session sets
  (``SESSION_ENV``; the task's own ``env`` wins);
- ``/proc`` views that agree with the limits: ``nproc`` through a cpuset of as many CPUs as the
  task has (taken in turn), ``MemTotal`` through a generated ``/proc/meminfo`` bind-mounted
  read-only over the kernel's, as LXCFS does (``meminfo_mount``, where the engine sees this
  machine's files);
- no grading path before grading: no tmpfs at ``/logs/verifier``. The room the verifier's logs
  need on a full disk is the helper's disk reserve instead (``LOGS_RESERVE_MB`` on top of the
  tests' ``GRADING_RESERVE_MB``, ``excess.py``), given back when grading starts.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from docker.types import Mount

from envfarm.sandbox.docker.limits import engine_capacity
from envfarm.sandbox.images.workstation import LOCALE
from envfarm.settings import WORKSTATION_USER

INIT_PATH = "/sbin/init"
OPTIONS_ENV = "INIT_OPTS"
"""The helper's options under the profile (``sandboxd.c`` reads, then unsets it)."""
HIDE_CONTAINER = "--hide-container"
USER = WORKSTATION_USER
HOSTNAME = "alex-thinkpad"
LOGS_RESERVE_MB = 64
"""Disk for the verifier's logs beyond the tests' reserve, where the tmpfs is not mounted."""
SESSION_ENV = {
    "USER": USER,
    "LOGNAME": USER,
    "SHELL": "/bin/bash",
    "TERM": "xterm-256color",
    "LANG": LOCALE,
}
DRESS_CAPS = ("NET_ADMIN", "MKNOD")
"""Given for the helper's ``--dress`` alone (``images/sandboxd/dress.c``): it drops them from
its permitted set before it starts anything, and no-new-privileges keeps them dropped."""


_next_cpu = itertools.count()


def cpuset(cpus: float, engine_cpus: int) -> str | None:
    """The CPUs a sandbox of ``cpus`` may run on, so ``nproc`` agrees with its limit; taken in
    turn, so sandboxes spread over the engine's CPUs. None: it may use them all."""
    want = max(1, math.ceil(cpus))
    if want >= engine_cpus:
        return None
    start = next(_next_cpu) * want % engine_cpus
    return ",".join(str((start + i) % engine_cpus) for i in range(want))


SHM_DIR = "/dev/shm"
_KEPT = ("Vmalloc", "Huge", "DirectMap", "Percpu", "Unevictable", "Mlocked", "Writeback")


def meminfo_text(memory_mb: int, host: str) -> str:
    """``/proc/meminfo`` as a machine with ``memory_mb`` would show it: the host's lines, with
    the totals and the free figures brought within the limit (as LXCFS does) and no swap."""
    total = memory_mb * 1024
    lines = []
    for line in host.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        value = int(parts[0]) if parts and parts[0].isdigit() else None
        if value is not None and name == "MemTotal":
            value = total
        elif value is not None and name in ("MemFree", "MemAvailable"):
            value = min(value, total * 9 // 10)
        elif value is not None and name in ("SwapTotal", "SwapFree", "SwapCached"):
            value = 0
        elif value is not None and not name.startswith(_KEPT):
            value = min(value, total // 20)
        if value is None:
            lines.append(line)
            continue
        unit = f" {parts[1]}" if len(parts) > 1 else ""
        lines.append(f"{name + ':':<16}{value:>8}{unit}")
    return "\n".join(lines) + "\n"


def meminfo_mount(memory_mb: int, cache: Path) -> Mount | None:
    """A read-only bind mount of a generated ``/proc/meminfo`` (runc allows one over it); None
    when this machine has no ``/proc/meminfo`` to start from. The file lives in ``/dev/shm``
    where there is one: ``/proc/self/mountinfo`` shows a bind mount's source path, and a tmpfs
    path with a neutral name tells less than envfarm's cache directory."""
    shm = Path(SHM_DIR)
    folder = shm if shm.is_dir() and os.access(shm, os.W_OK) else cache / "meminfo"
    target = folder / f"meminfo-{memory_mb}"
    if not target.is_file():
        try:
            host = Path("/proc/meminfo").read_text(encoding="ascii")
        except OSError:
            return None
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent)
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(meminfo_text(memory_mb, host))
        os.chmod(tmp, 0o444)
        os.replace(tmp, target)
    return Mount("/proc/meminfo", str(target), type="bind", read_only=True)


@functools.cache
def _engine_cpus() -> int:
    return max(1, int(engine_capacity()[0]))


def workstation_create(
    kwargs: dict[str, Any],
    helper: list[str],
    env: dict[str, str],
    cpus: float,
    engine_execs: bool = False,
) -> tuple[list[str], dict[str, Any]]:
    """The helper's command and the create arguments of a workstation container, from those of
    an ordinary one: ``helper`` is its command line (path first), ``kwargs`` the rest.
    ``engine_execs``: the engine will exec in it (the image's own ``HEALTHCHECK``), and such a
    process has the container's capabilities, not what the helper kept: no ``NET_ADMIN`` then,
    so no network interface is dressed (the helper says so on its stderr)."""
    options = " ".join([*helper[1:], HIDE_CONTAINER, "--sudo", "--tty", "--dress", USER])
    kwargs = {key: value for key, value in kwargs.items() if key != "tmpfs"}
    dress = [cap for cap in DRESS_CAPS if not (engine_execs and cap == "NET_ADMIN")]
    kwargs["cap_add"] = [*kwargs.get("cap_add", []), *dress]
    environment = {**SESSION_ENV, **env, OPTIONS_ENV: options}
    kwargs.update(hostname=HOSTNAME, cgroupns="private", environment=environment)
    if (cpu_set := cpuset(cpus, _engine_cpus())) is not None:
        kwargs["cpuset_cpus"] = cpu_set
    return [INIT_PATH], kwargs
