"""The capture endpoint's own overhead per model call, over the sandbox's helper stream.

One keep-alive HTTP client (Python's http.client, a loop of N calls) makes the same
chat-completions call three ways, all in this run against the same fake vLLM server:

* direct: from the host to the fake server (the baseline: the model server's own cost);
* capture: from the host to the capture endpoint, which forwards through the policy client
  and records the turn;
* relayed: from inside a no-network sandbox to the capture endpoint through the port relay
  over the helper channel, as an installed agent makes it.

Overhead = a way's per-call latency minus direct's (p50 of each). Target: relayed under 2 ms
above direct at p50. Usage: ``python bench/capture.py [--calls 300] [--task tasks/fix-lru-cache]``
(the task's image must provide python3).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import statistics
import sys
from pathlib import Path

from envfarm.agent.capture.server import CaptureServer
from envfarm.agent.capture.session import CaptureLimits, CaptureSession
from envfarm.policy import PolicyServer
from envfarm.policy.base import SamplingParams
from envfarm.policy.openai import OpenAIPolicy
from envfarm.policy.profiles import CaptureOptions
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.sandbox.forwarding import port_forwarding
from envfarm.spec.task import load_task
from envfarm.testing.fake_vllm import FakeVLLM

CLIENT = r"""
import http.client, json, sys, time
port, calls, prefix = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi " * 200}],
    "tools": [{"type": "function",
               "function": {"name": "bash", "parameters": {"type": "object"}}}]})
conn = http.client.HTTPConnection("127.0.0.1", port)
out = []
for i in range(calls + 10):
    start = time.perf_counter()
    conn.request("POST", prefix + "/chat/completions", body, {"Content-Type": "application/json"})
    response = conn.getresponse(); response.read()
    assert response.status == 200, response.status
    if i >= 10: out.append(time.perf_counter() - start)
print(json.dumps(out))
"""


async def host_client(port: int, calls: int, prefix: str = "/v1") -> list[float]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CLIENT, str(port), str(calls), prefix, stdout=asyncio.subprocess.PIPE
    )
    stdout, _ = await process.communicate()
    return list(json.loads(stdout))


async def main(calls: int, task_dir: Path) -> None:
    backend = DockerBackend()
    task = load_task(task_dir)
    image = await backend.prepare(task)
    fake = FakeVLLM(commands=["ls"] * (3 * calls + 40))
    async with (
        PolicyServer(fake) as server,
        OpenAIPolicy(server.base_url, "m", capture=CaptureOptions(profile="vllm")) as client,
    ):
        session = CaptureSession(
            client, sampling=SamplingParams(), limits=CaptureLimits(max_turns=10**9)
        )
        async with CaptureServer(session, model="policy") as capture:
            results = {
                "direct": await host_client(
                    int(server.base_url.rsplit(":", 1)[1].split("/")[0]), calls
                ),
                "capture": await host_client(capture.port, calls),
            }
            sandbox = backend.create(task, image, run_id="bench-capture")
            async with sandbox:
                forward = await port_forwarding(sandbox).forward_port("127.0.0.1", capture.port)
                script = f"python3 -c {shlex.quote(CLIENT)} {forward.port} {calls} /v1"
                result = await sandbox.exec(script, timeout=600)
                assert result.exit_code == 0, result.stderr
                results["relayed"] = list(json.loads(result.stdout))
                await forward.aclose()
    base = statistics.median(results["direct"]) * 1000
    print(
        f"{calls} calls each, task image {image.tag}, "
        f"load {Path('/proc/loadavg').read_text().split()[0]}"
    )
    print("| way | p50 | p90 | p99 | overhead p50 over direct |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for way, values in results.items():
        p50 = statistics.median(values) * 1000
        q = statistics.quantiles(values, n=100)
        print(
            f"| {way} | {p50:.2f} ms | {q[89] * 1000:.2f} ms | {q[98] * 1000:.2f} ms "
            f"| {p50 - base:+.2f} ms |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--task", type=Path, default=Path("tasks/fix-lru-cache"))
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.task))
