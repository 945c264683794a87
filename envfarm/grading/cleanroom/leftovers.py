"""What the agent left running when a clean room stops it, kept as a note of the episode.

A clean-room verifier (``clean``, ``separate``) never sees a process of the agent's: the agent's
container is swept, restarted or replaced first. That is the point, and also why a task whose
tests grade a server its solution started (redis, supervisord) fails there while Harbor's
default (``shared``) passes it. The note names what was stopped, so that ``envfarm check`` can
say so when the oracle misses (``check/explain.py``); it is read with bash's builtins alone, so
listing starts no process of its own, and never changes an outcome (a failed listing is no
note)."""

from __future__ import annotations

from envfarm.errors import SandboxError
from envfarm.sandbox.base import Sandbox

STOPPED_NOTE = "stopped for the clean room: "
"""The note's prefix; the command lines follow, joined by ``; ``."""
MAX_SHOWN = 8
MAX_CHARS = 120
_LIST = (
    "for d in /proc/[0-9]*; do p=${d#/proc/}; { [ $p = 1 ] || [ $p = $$ ]; } && continue; "
    "mapfile -d '' args < $d/cmdline 2>/dev/null && [ ${#args[@]} -gt 0 ] "
    '&& printf "%s\\n" "${args[*]}"; done'
)


async def left_running(sandbox: Sandbox) -> list[str]:
    """The command lines of the processes running in ``sandbox`` besides its init."""
    try:
        result = await sandbox.exec(_LIST, timeout=30, user="root")
    except (SandboxError, OSError):
        return []
    lines = [line.strip()[:MAX_CHARS] for line in result.stdout.splitlines() if line.strip()]
    return list(dict.fromkeys(lines))


def stopped_note(commands: list[str]) -> str | None:
    if not commands:
        return None
    more = len(commands) - MAX_SHOWN
    shown = "; ".join(commands[:MAX_SHOWN]) + (f"; and {more} more" if more > 0 else "")
    return STOPPED_NOTE + shown


def stopped_in(notes: list[str]) -> str | None:
    """What a clean room stopped, as its note says; None without one."""
    for note in notes:
        if note.startswith(STOPPED_NOTE):
            return note.removeprefix(STOPPED_NOTE)
    return None
