"""envfarm's processes (``envfarm serve``, chaos workers) as real processes on loopback, for the
integration tests and the chaos benchmark: one harness that starts, kills and restarts them.

A process is ready when its log shows its ready line (the server picks a free port with
``--port 0`` unless told one and prints its URL); its output goes to a log file that is shown
when something fails, appended to across restarts.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

READY_S = 180.0


def free_port() -> int:
    """A loopback port nothing listens on now (for a process restarted at the same address)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ProductProcess:
    """A command started (and restarted) in ``workdir``, ready when ``ready`` matches its log
    (the first group, if any, becomes ``url``)."""

    def __init__(
        self,
        workdir: Path,
        command: list[str],
        ready: str,
        *,
        log_name: str,
        env: dict[str, str] | None = None,
    ) -> None:
        self.workdir, self.command, self.ready = workdir, command, ready
        self.env = env or {}
        self.log = workdir / log_name
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.starts = 0

    def _environment(self) -> dict[str, str]:
        return {**os.environ, "COLUMNS": "1000", **self.env}

    def start(self) -> ProductProcess:
        offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.command, cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
                env=self._environment(),
            )  # fmt: skip
        self.starts += 1
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            text = self.log.read_bytes()[offset:].decode(errors="replace")
            found = re.search(self.ready, text)
            if found:
                self.url = found.group(1) if found.groups() else ""
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        self.kill()
        raise AssertionError(f"{self.describe()} did not start:\n{self.output()}")

    def describe(self) -> str:
        return " ".join(self.command[2:4])

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def stop(self, signum: int = signal.SIGTERM, timeout_s: float = 120.0) -> int:
        """Send ``signum`` and wait for the exit status."""
        assert self.process is not None
        self.process.send_signal(signum)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.describe()} ignored {signum}:\n{self.output()}") from None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-20000:] if self.log.exists() else ""


class ServeProcess(ProductProcess):
    """``envfarm serve --port 0 ARGS`` (a later ``--port`` in ``args`` wins), with ``token`` as
    ``ENVFARM_TOKEN``."""

    def __init__(
        self, workdir: Path, *args: str, token: str | None = None, env: dict[str, str] | None = None
    ) -> None:
        command = [sys.executable, "-m", "envfarm", "serve", "--port", "0", *args]
        super().__init__(workdir, command, r"serving on (http://\S+?) ", log_name="serve.log",
                         env=env)  # fmt: skip
        self.args = list(args)
        self.token = token

    def _environment(self) -> dict[str, str]:
        env = super()._environment()
        env.pop("ENVFARM_TOKEN", None)
        if self.token:
            env["ENVFARM_TOKEN"] = self.token
        return env

    def start(self) -> ServeProcess:
        super().start()
        return self


class ChaosWorkerProcess(ProductProcess):
    """``python -m envfarm.testing.chaos_worker ARGS``: ``envfarm worker``'s controller with
    Docker for the chaos Docker tasks and a self-grading fake sandbox for the rest."""

    def __init__(self, workdir: Path, name: str, *args: str) -> None:
        command = [sys.executable, "-m", "envfarm.testing.chaos_worker", *args]
        super().__init__(workdir, command, r"envfarm: worker on", log_name=f"{name}.log")
        self.name = name
