"""A PostgreSQL cluster of one test or benchmark alone, to restart at will: ``initdb`` and
``pg_ctl`` on a free port, with its own data directory and socket directory under ``root``
(which the ``postgres`` user must be able to reach), run as ``postgres`` when run as root.
Never the machine's cluster: that one is shared.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from envfarm.errors import EnvfarmError


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def postgres_binary(name: str) -> str:
    """``name`` on PATH, else in Debian's versioned directory (newest first)."""
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if found is None:
        raise EnvfarmError(f"{name} not found: install PostgreSQL's server package")
    return found


class PrivateCluster:
    """A PostgreSQL cluster of this run alone: its own data directory, socket and port."""

    def __init__(self, root: Path, settings: dict[str, str] | None = None) -> None:
        self.root, self.port, self.settings = root, free_port(), settings or {}
        self.data, self.sockets = root / "data", root / "sockets"

    def _as_owner(self, *command: str) -> list[str]:
        binary = postgres_binary(command[0])
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
        extra = "".join(f" -c {key}={value}" for key, value in self.settings.items())
        options = f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1{extra}"
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


@contextlib.contextmanager
def private_postgres(settings: dict[str, str] | None = None) -> Iterator[str]:
    """The URL of a fresh cluster's ``postgres`` database, stopped and removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="envfarm-pg-"))
    os.chmod(root, 0o755)
    cluster = PrivateCluster(root, settings)
    try:
        cluster.start()
        yield cluster.url
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
