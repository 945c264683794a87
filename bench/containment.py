"""Escape and containment probes under runc and gVisor, as a table (docs/security.md).

Runs ``envfarm.testing.containment.PROBE`` as root in a default sandbox of each runtime, with
stand-ins the benchmark serves itself (an HTTP server on the host's bridge address and another
sandbox's service), and prints each promise with its verdict and what the probe saw.

    .venv/bin/python bench/containment.py
"""

from __future__ import annotations

import asyncio
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.images.task_images import ensure_base_image
from envfarm.sandbox.docker.networks import bridge_gateway
from envfarm.sandbox.docker.sandbox import DockerSandbox, DockerSandboxConfig
from envfarm.testing.containment import host_namespaces, parse, probe_command, verdicts

PORT = 8765
LISTEN = (
    "perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalPort => "
    f"{PORT}, Listen => 5, ReuseAddr => 1) or die; while ($c = $s->accept) {{ close $c }}' "
    "</dev/null >/dev/null 2>&1 &"
)


class _Host(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


async def main() -> None:
    image = (await ensure_base_image()).tag
    server = ThreadingHTTPServer((bridge_gateway(), 0), _Host)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = f"{bridge_gateway()}:{server.server_address[1]}"
    neighbour_config = DockerSandboxConfig(image=image, network=True, run_id="bench-containment")
    async with DockerSandbox(neighbour_config) as neighbour:
        await neighbour.exec(LISTEN)
        attrs = docker_client().api.inspect_container(neighbour.container_id)
        targets = [host, f"{attrs['NetworkSettings']['Networks']['bridge']['IPAddress']}:{PORT}"]
        rows: dict[str, dict[str, bool]] = {}
        seen: dict[str, dict[str, object]] = {}
        for runtime in (None, "runsc"):
            name = runtime or "runc"
            config = DockerSandboxConfig(image=image, runtime=runtime, run_id="bench-containment")
            async with DockerSandbox(config) as sandbox:
                found = parse((await sandbox.exec(probe_command(targets), timeout=60)).stdout)
            seen[name] = found
            rows[name] = verdicts(found, host_namespaces(), targets)
    server.shutdown()
    promises = list(rows["runc"])
    print(f"{'promise':40} {'runc':>6} {'gvisor':>7}")
    for promise in promises:
        marks = ["kept" if rows[name][promise] else "BROKEN" for name in ("runc", "runsc")]
        print(f"{promise:40} {marks[0]:>6} {marks[1]:>7}")
    for name, found in seen.items():
        print(f"\n{name}: {found}")


if __name__ == "__main__":
    asyncio.run(main())
