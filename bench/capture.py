"""The capture endpoint's own overhead per model call, over the sandbox's helper stream.

One keep-alive HTTP client (Python's http.client, a loop of N calls) makes the same
chat-completions call several ways, all in this run against the same fake vLLM server, the
ways interleaved over ``--rounds`` rounds so that a change of the machine's load hits them all:

* direct: from the host to the fake server (the model server's own cost);
* policy client: envfarm's policy client calling the fake server from this process, as the
  built-in loop does (its request building and token parsing included);
* capture: from the host to the capture endpoint, which forwards through that policy client
  and records the turn;
* capture in process: the same request's bytes fed to the endpoint's HTTP protocol in this
  process and its answer taken from the transport (no socket, no other process: the
  endpoint's own cost beside the policy client's, the least disturbed by the machine's load);
* helper ping: one ``ping`` request and its answer over the helper stream (the floor of any
  round trip through it; not an HTTP call);
* relay only: from inside a no-network sandbox straight to the fake server through the port
  relay over the helper stream (the relay's own cost, no capture);
* relayed: from inside a no-network sandbox to the capture endpoint, served in process by the
  port relay (``serve_port``), as an installed agent makes it;
* relayed over TCP: the same through the relay's TCP target, the endpoint's loopback port
  (one more socket hop each way on envfarm's side).

The capture endpoint's own overhead is relayed minus policy client (what an installed agent's
call costs beyond the built-in loop's); relayed minus direct is shown too, and its two parts
apart: capture in process minus policy client (envfarm's side) and relay only minus direct (the
helper stream's transport). Target: under 2 ms at p50. "CPU/call here" is this process's CPU
time per call (the fake server's included), which a loaded machine distorts less than latency.
Every way starts from the same heap (what the fake server keeps is cleared, the session is a
new one). Usage: ``python bench/capture.py [--calls 300] [--rounds 2] [--task
tasks/fix-lru-cache]`` (the task's image must have python3).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import shlex
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from envfarm.agent.capture.server import CaptureServer
from envfarm.agent.capture.session import CaptureLimits, CaptureSession
from envfarm.plan.planner import plan_episode
from envfarm.policy import PolicyServer
from envfarm.policy.base import SamplingParams
from envfarm.policy.openai import OpenAIPolicy
from envfarm.policy.profiles import CaptureOptions
from envfarm.sandbox.base import Sandbox
from envfarm.sandbox.channel.client import Channel
from envfarm.sandbox.channel.relay import ChannelPortForwarding
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


def _load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


async def policy_calls(client: OpenAIPolicy, calls: int) -> list[float]:
    """The built-in loop's model call: the policy client in this process, no capture."""
    messages = [{"role": "user", "content": "hi " * 200}]
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    out = []
    for i in range(calls + 10):
        start = time.perf_counter()
        await client.complete(messages, tools, SamplingParams())
        if i >= 10:
            out.append(time.perf_counter() - start)
    return out


async def main(calls: int, task_dir: Path, rounds: int) -> None:
    load = _load()
    backend = DockerBackend()
    task = load_task(task_dir)
    image = await backend.prepare(plan_episode(task).sandbox)
    fake = FakeVLLM(commands=["ls"])  # every call is the first step: the same answer
    results: dict[str, list[float]] = {}
    cpu: dict[str, float] = {}

    async def measure(way: str, run: Awaitable[list[float]]) -> None:
        # Every way starts from the same heap: what the fake server and the session kept from
        # the ways before would otherwise make the garbage collector slower for the later ones.
        fake.requests.clear()
        fake.replies.clear()
        capture.session = new_session()
        gc.collect()
        before = time.process_time()
        values = await run
        cpu[way] = cpu.get(way, 0.0) + (time.process_time() - before) / (calls + 10)
        results[way].extend(values)

    async with (
        PolicyServer(fake) as server,
        OpenAIPolicy(server.base_url, "m", capture=CaptureOptions(profile="vllm")) as client,
    ):

        def new_session() -> CaptureSession:
            return CaptureSession(
                client, sampling=SamplingParams(), limits=CaptureLimits(max_turns=10**9)
            )

        async with (
            CaptureServer(new_session(), model="policy") as capture,
            backend.create(plan_episode(task).sandbox, image, run_id="bench-capture") as sandbox,
        ):
            assert isinstance(sandbox, ChannelPortForwarding)
            channel = sandbox.channel
            assert channel is not None
            fake_port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
            relay = port_forwarding(sandbox)
            forwards = {
                "relay only": await relay.forward_port("127.0.0.1", fake_port),
                "relayed": await relay.serve_port(capture.protocol),
                "relayed over TCP": await relay.forward_port("127.0.0.1", capture.port),
            }
            ways: list[tuple[str, Callable[[], Awaitable[list[float]]]]] = [
                ("direct", lambda: host_client(fake_port, calls)),
                ("policy client", lambda: policy_calls(client, calls)),
                ("capture", lambda: host_client(capture.port, calls)),
                ("capture in process", lambda: in_process(capture, calls)),
                ("helper ping", lambda: pings(channel, calls)),
            ]
            ways += [
                (way, functools.partial(sandbox_client, sandbox, forward.port, calls))
                for way, forward in forwards.items()
            ]
            for way, _ in ways:
                results[way] = []
            # The ways interleaved, so a change of load hits them all, and their order rotated
            # each round, so none always follows the same one.
            for index in range(rounds):
                shift = index % len(ways)
                for way, run in ways[shift:] + ways[:shift]:
                    await measure(way, run())
            for forward in forwards.values():
                await forward.aclose()
    base = statistics.median(results["direct"]) * 1000
    loop_call = statistics.median(results["policy client"]) * 1000
    print(
        f"{calls} calls x {rounds} rounds each, task image {image.tag}, load {load} at the "
        f"start, {_load()} at the end"
    )
    print("| way | p50 | p90 | p99 | p50 over direct | p50 over policy client | CPU/call here |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for way, values in results.items():
        p50 = statistics.median(values) * 1000
        q = statistics.quantiles(values, n=100)
        print(
            f"| {way} | {p50:.2f} ms | {q[89] * 1000:.2f} ms | {q[98] * 1000:.2f} ms "
            f"| {p50 - base:+.2f} ms | {p50 - loop_call:+.2f} ms "
            f"| {cpu[way] / rounds * 1000:.2f} ms |"
        )


class _Answered(asyncio.Transport):
    """A transport that hands the first write of each exchange to a future."""

    def __init__(self) -> None:
        super().__init__()
        self.answer: asyncio.Future[bytes] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.answer is not None and not self.answer.done():
            self.answer.set_result(bytes(data))

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


async def in_process(capture: CaptureServer, calls: int) -> list[float]:
    """The CLIENT's request fed to the capture endpoint's protocol, one exchange at a time."""
    body = json.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi " * 200}],
            "tools": [
                {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
            ],
        }
    ).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    transport, protocol = _Answered(), capture.protocol()
    protocol.connection_made(transport)
    loop = asyncio.get_running_loop()
    out = []
    for i in range(calls + 10):
        start = time.perf_counter()
        transport.answer = loop.create_future()
        protocol.data_received(head.encode())
        protocol.data_received(body)
        answer = await transport.answer
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:80]
        if i >= 10:
            out.append(time.perf_counter() - start)
    return out


async def pings(channel: Channel, calls: int) -> list[float]:
    out = []
    for i in range(calls + 10):
        start = time.perf_counter()
        await channel.ping()
        if i >= 10:
            out.append(time.perf_counter() - start)
    return out


async def sandbox_client(sandbox: Sandbox, port: int, calls: int) -> list[float]:
    script = f"python3 -c {shlex.quote(CLIENT)} {port} {calls} /v1"
    result = await sandbox.exec(script, timeout=600)
    assert result.exit_code == 0, result.stderr
    return list(json.loads(result.stdout))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--task", type=Path, default=Path("tasks/fix-lru-cache"))
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.task, args.rounds))
