"""A PostgreSQL cluster of one test or benchmark alone, to restart at will: ``initdb`` and
``pg_ctl`` on a free port, with its own data directory and socket directory under ``root``
(which the ``postgres`` user must be able to reach), run as ``postgres`` when run as root.
Never the machine's cluster: that one is shared.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrivateCluster:
    """A PostgreSQL cluster of this run alone: its own data directory, socket and port."""

    def __init__(self, root: Path) -> None:
        self.root, self.port = root, free_port()
        self.data, self.sockets = root / "data", root / "sockets"

    def _as_owner(self, *command: str) -> list[str]:
        binary = shutil.which(command[0]) or command[0]
        if os.geteuid() != 0:
            return [binary, *command[1:]]
        return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", binary,
                *command[1:]]  # fmt: skip

    def _run(self, *command: str) -> None:
        # the server outlives pg_ctl: it must not hold our pipes open
        subprocess.run(
            self._as_owner(*command),
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=300,
        )

    def start(self) -> PrivateCluster:
        self.sockets.mkdir(parents=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
            shutil.chown(self.sockets, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "envfarm", "--auth=trust", "-E", "UTF8")
        self.resume()
        return self

    def resume(self) -> None:
        """Start the server (again) on the same port."""
        options = f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1"
        log = str(self.root / "pg.log")
        self._run("pg_ctl", "-D", str(self.data), "-l", log, "-w", "-o", options, "start")

    def crash(self) -> None:
        """Stop in immediate mode: every backend killed, recovery at the next start."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def restart(self) -> None:
        """An immediate-mode restart: ``crash`` then ``resume``."""
        self.crash()
        self.resume()

    def stop(self) -> None:
        subprocess.run(self._as_owner("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop"),
                       capture_output=True, timeout=120)  # fmt: skip

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://envfarm@127.0.0.1:{self.port}/postgres"
