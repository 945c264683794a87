"""The battery run on the machine that runs the audit (``--compare-host``): shown beside
each tell for comparison, never the reference (servers run as root, without a terminal)."""

from __future__ import annotations

import asyncio
import time

from envfarm.audit.battery import Battery, Probe
from envfarm.audit.report import ProbeResult, judge


async def probe_host(battery: Battery) -> list[ProbeResult]:
    return [await _one(probe) for probe in battery.probes]


async def _one(probe: Probe) -> ProbeResult:
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        "bash", "-c", probe.command,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        async with asyncio.timeout(probe.timeout_s):
            out, _ = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        return judge(probe, "", None, f"timed out after {probe.timeout_s:g}s")
    result = judge(probe, out.decode(errors="replace"), process.returncode, None)
    result.duration_s = time.monotonic() - started
    return result
