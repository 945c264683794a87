"""Build logs kept per image, so every episode's artifacts hold its image's build output.

``BuildLog`` collects the output of one ``prepare`` (the task's image, its sidecars' and any
base image rebuilt on the way), keeping the tail. When something was built, the log is also
written to ``$XDG_CACHE_HOME/envfarm/build-logs/<image id>.log``; when every image was found
built, that file is read back, so a later run still has the log of the build that made it.
"""

from __future__ import annotations

import collections
import re
from pathlib import Path

from envfarm.sandbox.docker.sandboxd import cache_dir

MAX_LINES = 20_000
MAX_CHARS = 1_000_000


def log_path(image_id: str) -> Path:
    return cache_dir() / "build-logs" / (re.sub(r"[^\w.-]", "_", image_id) + ".log")


class BuildLog:
    def __init__(self) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=MAX_LINES)

    def __call__(self, line: str) -> None:
        self.lines.append(line)

    def text(self) -> str:
        return ("\n".join(self.lines) + "\n")[-MAX_CHARS:] if self.lines else ""

    def settle(self, image_id: str | None, built: bool) -> str:
        """The log for the artifacts: this build's (kept for later runs), or the kept one."""
        if image_id is None:
            return self.text() or "no image id: no build log kept\n"
        path = log_path(image_id)
        if built and self.lines:
            text = self.text()
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
            except OSError:
                pass  # the log still goes to this run's artifacts
            return text
        try:
            return path.read_text(encoding="utf-8")
        except OSError:
            return f"image {image_id} was built before this run; its build log was not kept\n"
