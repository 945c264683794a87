"""`envfarm run` with repeated --policy: two endpoints through 503 storms and aborts."""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from envfarm.policy import PolicyServer, Reply, builtin_responder, error_reply
from envfarm.testing.scripted import FaultyResponder, Step, completion

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-e2e-pool-3c9b1f"


class Served:
    """The ``nop`` policy, counting the completions it delivers."""

    def __init__(self) -> None:
        self.count = 0
        self._nop = builtin_responder("nop")

    async def __call__(self, request: dict[str, Any]) -> Reply:
        self.count += 1
        return await self._nop(request)


def faults() -> list[Step]:
    storm = error_reply(503, "generation is paused for a weight update; retry shortly")
    storm.headers["Retry-After"] = "0"
    return [completion("I will sta", finish_reason="abort"), *[storm] * 15]


async def test_two_endpoints_ride_out_a_storm_and_each_turn_names_its_server(
    tmp_path: Path,
) -> None:
    served = [Served(), Served()]
    responders = [FaultyResponder(s, faults()) for s in served]
    out = tmp_path / "run"
    async with (
        PolicyServer(responders[0], api_key=KEY) as a,
        PolicyServer(responders[1], api_key=KEY) as b,
    ):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "envfarm",
            "run",
            "tasks/fix-lru-cache",
            "--policy",
            a.base_url,
            "--policy",
            f"{b.base_url}=2",
            "--model",
            "nop",
            "--api-key",
            KEY,
            "--group-size",
            "3",
            "--out",
            str(out),
            cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 1800)
    output = stdout.decode() + stderr.decode()
    assert proc.returncode == 0, output[-3000:]
    trajectories = [
        json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()
    ]
    assert len(trajectories) == 3
    assert all(t["reward"]["valid"] and t["outcome"]["stop_reason"] for t in trajectories)
    # A completion comes only from an endpoint past its faults: at least one storm was ridden out.
    assert sum(len(r.faults.steps) - r.faults.remaining for r in responders) >= len(faults())
    turns = [turn for t in trajectories for turn in t["turns"]]
    assert Counter(turn["endpoint"] for turn in turns) == {
        url: s.count for url, s in zip((a.base_url, b.base_url), served, strict=True) if s.count
    }
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policy"] == f"{a.base_url}, {b.base_url}"
    written = b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())  # store too
    assert KEY not in output
    assert KEY.encode() not in written
