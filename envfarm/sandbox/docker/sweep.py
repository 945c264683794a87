"""Whether the helper's sweep stands for a restart of a Docker sandbox.

The helper (``images/sandboxd/sweep.c``) kills every process but itself and reports what a
restart would also have reset. One thing only the sandbox knows is added here: a capability
beyond ``DEFAULT_CAPS`` (``SYS_PTRACE``) would let a process of the agent's trace the helper,
whose word then proves nothing.
"""

from __future__ import annotations

from envfarm.errors import SandboxError, SandboxGone
from envfarm.sandbox.base import Swept
from envfarm.sandbox.channel.client import Channel
from envfarm.sandbox.docker.sandbox_config import DockerSandboxConfig
from envfarm.sandbox.hardening import DEFAULT_CAPS


async def sweep_in_place(
    channel: Channel, config: DockerSandboxConfig, since: float
) -> Swept | str:
    """``InPlaceGrading.end_processes`` on ``channel`` (the network left as it is); SandboxGone
    when the helper is gone."""
    try:
        sweep = await channel.sweep(since)
    except SandboxGone:
        raise
    except SandboxError as exc:
        return f"the helper could not end the processes ({exc})"
    added = sorted(set(config.cap_add) - set(DEFAULT_CAPS))
    if sweep.residue:
        return "; ".join(sweep.residue)
    if added:
        return f"the container has the capabilities {', '.join(added)}"
    return Swept(sweep.tmpfs)
