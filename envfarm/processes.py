"""Which process owns what: this host's name and whether a pid is still running.

Sandboxes (labels ``host:pid``) and store leases (workers' host and pid) are owned by a
process; when that process is gone, what it owned is reaped or reclaimed at once.
"""

from __future__ import annotations

import os
import socket


def host_name() -> str:
    return socket.gethostname()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
