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
- a private cgroup namespace (``/proc/self/cgroup`` says ``/``, not ``/docker/<id>``), the
  hostname of a developer's machine (``HOSTNAME``), and the variables a login session sets
  (``SESSION_ENV``; the task's own ``env`` wins);
- no grading path before grading: no tmpfs at ``/logs/verifier``. The room the verifier's logs
  need on a full disk is the helper's disk reserve instead (``LOGS_RESERVE_MB`` on top of the
  tests' ``GRADING_RESERVE_MB``, ``excess.py``), given back when grading starts.
"""

from __future__ import annotations

from typing import Any

INIT_PATH = "/sbin/init"
OPTIONS_ENV = "INIT_OPTS"
"""The helper's options under the profile (``sandboxd.c`` reads, then unsets it)."""
HIDE_CONTAINER = "--hide-container"
USER = "alex"
HOSTNAME = "alex-thinkpad"
LOGS_RESERVE_MB = 64
"""Disk for the verifier's logs beyond the tests' reserve, where the tmpfs is not mounted."""
SESSION_ENV = {
    "USER": USER,
    "LOGNAME": USER,
    "SHELL": "/bin/bash",
    "TERM": "xterm-256color",
    "LANG": "C.UTF-8",
}


def workstation_create(
    kwargs: dict[str, Any], helper: list[str], env: dict[str, str]
) -> tuple[list[str], dict[str, Any]]:
    """The helper's command and the create arguments of a workstation container, from those of
    an ordinary one: ``helper`` is its command line (path first), ``kwargs`` the rest."""
    options = " ".join([*helper[1:], HIDE_CONTAINER])
    kwargs = {key: value for key, value in kwargs.items() if key != "tmpfs"}
    environment = {**SESSION_ENV, **env, OPTIONS_ENV: options}
    kwargs.update(hostname=HOSTNAME, cgroupns="private", environment=environment)
    return [INIT_PATH], kwargs
