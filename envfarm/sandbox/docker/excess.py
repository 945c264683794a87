"""The agent's excess is the agent's outcome: memory limits that leave the helper alive.

Every command the helper starts runs with ``oom_score_adj`` 1000 (``sandboxd.c``), so under
runc the kernel's OOM killer takes a command, never the helper, and the session goes on.
gVisor has no cgroups inside a sandbox, and a sandbox over its cgroup limit is killed whole,
helper included: the agent's excess would end as ``SandboxGone``, an infrastructure fault,
retried and dropped. So under gVisor the helper caps each command's address space at the
task's memory (``--memory-limit-mb``, RLIMIT_AS) and the container gets ``GVISOR_HEADROOM_MB``
more for gVisor's own kernel: a command that asks for too much gets ENOMEM and the episode is
graded. Several commands each under the cap but together over it still end the sandbox; a
runtime that reserves far more address space than it uses (the JVM, V8) may not start under a
small ``memory_mb``. docs/security.md states both.

Processes the same way. An agent that forks until ``pids.max`` refuses leaves the sandbox
unable to start the verifier; so the helper knows the limit (``--pids-limit``) and, when grading
asks (``reclaim_processes``) and fewer than ``PIDS_RESERVE`` are free, kills what the agent's
finished commands left running. Under gVisor (ptrace platform) every guest process costs the
host several threads, and the sandbox dies outright when they reach the container's pids limit;
so there each command's user may have the task's number of processes but at most
``GVISOR_MAX_PROCESSES`` (RLIMIT_NPROC, which gVisor counts per sandbox and enforces even for
root without ``CAP_SYS_RESOURCE``: at 1,024 the sandbox still died, presumably gVisor's kernel,
a Go program, past Go's 10,000 threads), and the container gets
``GVISOR_HOST_THREADS_PER_PROCESS`` times that.

Disk: an agent that fills its disk quota and leaves it full would leave no room for the tests
and the verifier's reward (an upload failing with EDQUOT, an infrastructure fault). Harbor
mounts the verifier's logs from the host, outside the container's disk; envfarm mounts
``VERIFIER_TMPFS`` (the verifier logs' directory, empty until grading; its contents count as
the container's memory) in every container whose disk is limited. ``/tests`` is no mount: a
test script may remove it, as under Harbor, where it is a copied directory. Its room is
``GRADING_RESERVE_MB`` more than the task's quota, which the helper holds from its start in a
file no path names and gives back when grading asks (``free_reserve``), just before the tests
are written: they are uploaded and graded whatever the agent did to its disk, and may then fail
for want of room, which is the agent's outcome.
"""

from __future__ import annotations

from typing import NamedTuple

GVISOR_HEADROOM_MB = 128
GVISOR_HOST_THREADS_PER_PROCESS = 16
GVISOR_MAX_PROCESSES = 512
PIDS_RESERVE = 64
"""Processes grading needs free in a sandbox; below it the agent's leftovers are reclaimed."""


GRADING_RESERVE_MB = 64
"""Disk kept for the tests beyond a limited container's quota: their archive and their files."""

VERIFIER_TMPFS = {
    "/logs/verifier": "rw,exec,nosuid,nodev,size=256m,mode=0755",
}


class Limits(NamedTuple):
    memory_mb: int
    """The container's memory limit."""
    pids: int
    """The container's pids limit."""
    helper: list[str]
    """The helper's command line."""


def limits_and_helper(helper_path: str, memory_mb: int, pids: int, *, gvisor: bool) -> Limits:
    """The container's memory and pids limits for a task's, and the helper's command line."""
    if gvisor:
        processes = min(pids, GVISOR_MAX_PROCESSES)
        helper = [helper_path, "--pids-limit", str(processes), "--nproc-limit", str(processes),
                  "--memory-limit-mb", str(memory_mb)]  # fmt: skip
        host_pids = processes * GVISOR_HOST_THREADS_PER_PROCESS
        return Limits(memory_mb + GVISOR_HEADROOM_MB, host_pids, helper)
    return Limits(memory_mb, pids, [helper_path, "--pids-limit", str(pids)])
