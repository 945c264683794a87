"""``envfarm serve`` as a real process on loopback, for the API's integration tests.

The server picks a free port (``--port 0``) and prints its URL; its output goes to a log file
that is shown when something fails.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

READY_S = 180.0


class ServeProcess:
    def __init__(
        self, workdir: Path, *args: str, token: str | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.workdir = workdir
        self.env = env or {}
        self.args = list(args)
        self.token = token
        self.log = workdir / "serve.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> ServeProcess:
        command = [sys.executable, "-m", "envfarm", "serve", "--port", "0", *self.args]
        env = {**os.environ, "COLUMNS": "1000", **self.env}
        env.pop("ENVFARM_TOKEN", None)
        if self.token:
            env["ENVFARM_TOKEN"] = self.token
        offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                command, cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT, env=env
            )
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            text = self.log.read_bytes()[offset:].decode(errors="replace")
            found = re.search(r"serving on (http://\S+?) ", text)
            if found:
                self.url = found.group(1)
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        self.kill()
        raise AssertionError(f"envfarm serve did not start:\n{self.output()}")

    def stop(self, signum: int = signal.SIGTERM, timeout_s: float = 120.0) -> int:
        """Send ``signum`` and wait for the exit status."""
        assert self.process is not None
        self.process.send_signal(signum)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"envfarm serve ignored {signum}:\n{self.output()}") from None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-20000:] if self.log.exists() else ""
