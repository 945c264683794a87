"""A private PostgreSQL cluster for a benchmark: ``initdb`` in a temporary directory, started
with ``pg_ctl`` on a free loopback port, stopped and removed afterwards. It never touches a
server anyone else uses. As root, the cluster runs as the ``postgres`` system user (PostgreSQL
refuses to run as root)."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def _bin(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if found is None:
        raise SystemExit(f"{name} not found: install PostgreSQL's server package")
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def private_postgres(settings: dict[str, str] | None = None) -> Iterator[str]:
    """The SQLAlchemy URL of a fresh cluster's ``postgres`` database (user ``bench``)."""
    root = Path(tempfile.mkdtemp(prefix="envfarm-bench-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(root, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = root / "data", _free_port()
    options = {"listen_addresses": "127.0.0.1", "port": str(port),
               "unix_socket_directories": str(root), "max_connections": "200",
               **(settings or {})}  # fmt: skip
    flags = " ".join(f"-c {key}={value}" for key, value in options.items())
    run = {"check": True, "stdout": subprocess.DEVNULL, "stderr": subprocess.STDOUT}
    subprocess.run([*as_user, _bin("initdb"), "-D", str(data), "-U", "bench",
                    "--auth=trust", "-E", "UTF8"], **run)  # type: ignore[call-overload]  # fmt: skip
    subprocess.run([*as_user, _bin("pg_ctl"), "-D", str(data), "-l", str(root / "log"),
                    "-o", flags, "-w", "start"], **run)  # type: ignore[call-overload]  # fmt: skip
    # SIGTERM (a stopped benchmark) unwinds through the finally below and stops the cluster
    previous = signal.signal(signal.SIGTERM, _raise_exit)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ready = subprocess.run([_bin("pg_isready"), "-h", "127.0.0.1", "-p", str(port)],
                                   capture_output=True)  # fmt: skip
            if ready.returncode == 0:
                break
            time.sleep(0.2)
        yield f"postgresql+psycopg://bench@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, _bin("pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)


def _raise_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
