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
"""

from __future__ import annotations

GVISOR_HEADROOM_MB = 128


def memory_and_helper(helper_path: str, memory_mb: int, *, gvisor: bool) -> tuple[int, list[str]]:
    """The container's memory limit in MiB and the helper's command line."""
    if gvisor:
        return memory_mb + GVISOR_HEADROOM_MB, [helper_path, "--memory-limit-mb", str(memory_mb)]
    return memory_mb, [helper_path]
