"""What the helper's answers mean: a finished command (``ExecOutcome``), a sweep (``Sweep``), and
the exception an ``error`` answer stands for (``answer_error``).

File errors come back as ``OSError`` built from the helper's errno, so ENOENT is
``FileNotFoundError``, EISDIR ``IsADirectoryError``, EACCES ``PermissionError``; ESHUTDOWN (the
helper is ending) is ``SandboxGone``; any other refusal is a ``SandboxError``.
"""

from __future__ import annotations

import errno
import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envfarm.errors import SandboxError, SandboxGone


class ExecOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")

    exit_code: int | None
    """None when the command was killed by a signal (see ``signal``) or timed out."""
    signal: int | None = None
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_s: float = 0.0

    def docker_exit_code(self) -> int | None:
        """``docker exec``'s convention: None on timeout, 128 + signal for a killed command."""
        if self.timed_out:
            return None
        if self.exit_code is not None:
            return self.exit_code
        return 128 + self.signal if self.signal else -1


class Sweep(BaseModel):
    """The helper's sweep: the tmpfs mounts a restart would have emptied, and what else would
    still tell this container from a restarted one (empty: nothing)."""

    model_config = ConfigDict(extra="ignore")

    tmpfs: list[str] = Field(default_factory=list)
    residue: list[str] = Field(default_factory=list)


def answer_error(answer: dict[str, Any], path: str | None) -> Exception:
    """The exception an ``error`` answer (or an unexpected one) stands for: ``OSError`` (by
    errno, so ENOENT is ``FileNotFoundError``) for a file ``path``, else ``SandboxError``."""
    if answer.get("type") != "error":
        return SandboxError(f"unexpected answer from the sandbox helper: {answer}")
    code = int(answer.get("errno") or errno.EIO)
    message = str(answer.get("message") or os.strerror(code))
    if code == errno.ESHUTDOWN:
        return SandboxGone(f"the sandbox is shutting down ({message})")
    if path is None:
        return SandboxError(f"the sandbox helper refused the request: {message}")
    return OSError(code, message, str(answer.get("path") or path))
