"""Escape and containment probes, run as root inside sandboxes under runc and gVisor: no engine
socket, namespaces of their own, no raw sockets, mounts, module loading or chroot, no writable
sysrq-trigger or /sys, and no route to stand-ins the test serves itself (an HTTP server on the
host's bridge address, and another environment's service in a second sandbox)."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

import pytest
import pytest_asyncio

from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.networks import bridge_gateway
from envfarm.sandbox.docker.sandbox import DockerSandbox, DockerSandboxConfig
from envfarm.testing.containment import host_namespaces, parse, probe_command, verdicts

pytestmark = pytest.mark.asyncio(loop_scope="session")

NEIGHBOUR_PORT = 8765
LISTEN = (
    "perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalPort => "
    f"{NEIGHBOUR_PORT}, Listen => 5, ReuseAddr => 1) or die; while ($c = $s->accept) "
    "{ print $c qq(neighbour\\n); close $c }' </dev/null >/dev/null 2>&1 &"
)


class _Host(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"the host\n")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def host_stand_in() -> Iterator[str]:
    """``ip:port`` of an HTTP server on the default bridge's gateway address (the host)."""
    gateway = bridge_gateway()
    server = ThreadingHTTPServer((gateway, 0), _Host)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"{gateway}:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def neighbour(base_image: str) -> AsyncIterator[str]:
    """``ip:port`` of another environment's service: a sandbox on the bridge, listening."""
    config = DockerSandboxConfig(image=base_image, network=True, run_id="test-containment")
    async with DockerSandbox(config) as sandbox:
        await sandbox.exec(LISTEN)
        attrs = docker_client().api.inspect_container(sandbox.container_id)
        address = attrs["NetworkSettings"]["Networks"]["bridge"]["IPAddress"]
        reached = await sandbox.exec(  # wait for the listener, with a budget
            f"for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/{NEIGHBOUR_PORT} && cat <&3) "
            "2>/dev/null && break; sleep 0.1; done",
            timeout=30,
        )
        assert reached.stdout == "neighbour\n", "the neighbour's service did not start"
        yield f"{address}:{NEIGHBOUR_PORT}"


@pytest.mark.parametrize(
    ("runtime", "realism"),
    [(None, "off"), ("runsc", "off"), (None, "workstation")],
    ids=["runc", "gvisor", "runc-workstation"],
)
async def test_a_root_agent_cannot_escape_or_reach_anything(
    base_image: str,
    host_stand_in: str,
    neighbour: str,
    runtime: str | None,
    realism: Literal["workstation", "off"],
) -> None:
    targets = [host_stand_in, neighbour]
    config = DockerSandboxConfig(
        image=base_image, runtime=runtime, run_id="test-containment", realism=realism
    )
    async with DockerSandbox(config) as sandbox:
        result = await sandbox.exec(probe_command(targets), timeout=60)
        assert result.exit_code == 0, result.stderr
        found = parse(result.stdout)
        kept = verdicts(found, host_namespaces(), targets)
        assert [promise for promise, ok in kept.items() if not ok] == [], found
        assert found["routes"] == 0
        assert found["kernel"] == ("gvisor" if runtime else "host")
        if runtime is None:  # gVisor has no cgroup files inside; its limit is the engine's
            assert found["pids_max"] == "1024"
        attrs = docker_client().api.inspect_container(sandbox.container_id)
        # under gVisor the task's processes are RLIMIT_NPROC (at most 512); the engine's limit
        # counts the runtime's host threads, several per process (sandbox/docker/excess.py)
        assert attrs["HostConfig"]["PidsLimit"] == (1024 if runtime is None else 8192)


async def test_the_probe_sees_a_breach_where_there_is_one(
    base_image: str, host_stand_in: str
) -> None:
    """The probe is not blind: a sandbox given the network reaches the host's stand-in."""
    config = DockerSandboxConfig(image=base_image, network=True, run_id="test-containment")
    async with DockerSandbox(config) as sandbox:
        result = await sandbox.exec(probe_command([host_stand_in]), timeout=60)
        kept = verdicts(parse(result.stdout), host_namespaces(), [host_stand_in])
        assert kept[f"no route to {host_stand_in}"] is False
        assert kept["no raw sockets"] is True
