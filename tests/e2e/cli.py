"""``envfarm`` run as a user runs it: a subprocess of this interpreter in the checkout."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


async def envfarm(*args: str, timeout: float = 1200) -> tuple[int, str]:
    """The exit code and standard error of ``python -m envfarm ARGS``."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "envfarm",
        *args,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=timeout)
    assert process.returncode is not None
    return process.returncode, stderr.decode()
