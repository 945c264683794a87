"""The helper's port relay: a loopback port in a no-network container reaching a host server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from envfarm.agent.capture.server import CaptureServer
from envfarm.agent.capture.session import CaptureLimits, CaptureSession
from envfarm.policy import PolicyServer
from envfarm.policy.base import SamplingParams
from envfarm.policy.openai import OpenAIPolicy
from envfarm.policy.profiles import CaptureOptions
from envfarm.sandbox.docker.sandbox import DockerSandbox, DockerSandboxConfig
from envfarm.sandbox.forwarding import port_forwarding
from envfarm.testing.fake_vllm import FakeVLLM

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest_asyncio.fixture(loop_scope="session")
async def echo_server() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A host TCP server that answers every line with ``echo:`` and the line, upper-cased."""
    seen: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            seen.append(line)
            writer.write(b"echo:" + line.upper())
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, limit=1 << 20)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield port, seen


def _sandbox(image: str) -> DockerSandbox:
    config = {"image": image, "run_id": "test-relay", "network": False}
    return DockerSandbox(DockerSandboxConfig.model_validate(config))


PROBE = """exec 3<>/dev/tcp/127.0.0.1/{port} || exit 9
for i in $(seq {lines}); do
  line="$(head -c {size} /dev/zero | tr '\\0' x) line $i"
  printf '%s\\n' "$line" >&3
  read -r got <&3
  [ "$got" = "echo:${{line^^}}" ] || {{ echo "bad answer ${{got:0:80}}" >&2; exit 1; }}
done
echo ok"""


async def test_connections_in_a_no_network_sandbox_reach_the_host(
    base_image: str, echo_server: tuple[int, list[bytes]]
) -> None:
    port, seen = echo_server
    async with _sandbox(base_image) as sandbox:
        no_route = await sandbox.exec(f"exec 3<>/dev/tcp/127.0.0.1/{port}")
        assert no_route.exit_code != 0  # nothing listens in the container before the relay
        forward = await port_forwarding(sandbox).forward_port("127.0.0.1", port)
        assert forward.port > 0
        small = await sandbox.exec(PROBE.format(port=forward.port, lines=5, size=10))
        assert (small.exit_code, small.stdout.strip()) == (0, "ok"), small.stderr
        # several connections at once, each larger than one relay chunk
        probes = [
            sandbox.exec(PROBE.format(port=forward.port, lines=3, size=200_000)) for _ in range(3)
        ]
        for result in await asyncio.gather(*probes):
            assert (result.exit_code, result.stdout.strip()) == (0, "ok"), result.stderr
        assert len(seen) == 5 + 9
        await forward.aclose()
        closed = await sandbox.exec(PROBE.format(port=forward.port, lines=1, size=1))
        assert closed.exit_code != 0


async def test_relay_refuses_a_non_loopback_address(base_image: str) -> None:
    async with _sandbox(base_image) as sandbox:
        assert sandbox.channel is not None
        answer: asyncio.Future[dict[str, object]] = asyncio.get_running_loop().create_future()
        sandbox.channel.open_listener(
            {"op": "relay_listen", "host": "0.0.0.0", "port": 0},
            lambda header, _: None if answer.done() else answer.set_result(header),
        )
        refused = await answer
        assert refused["type"] == "error"
        assert "loopback" in str(refused["message"])


class _Shout(asyncio.Protocol):
    """Served in process: answers each line upper-cased, and closes on ``bye``."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport, self.buffer = transport, b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            self.transport.write(b"echo:" + line.upper() + b"\n")
            if line == b"bye":
                self.transport.close()


SERVED = """exec 3<>/dev/tcp/127.0.0.1/{port} || exit 9
printf 'hello\\nbye\\n' >&3
cat <&3"""


async def test_a_protocol_served_in_process_answers_and_closes(base_image: str) -> None:
    async with _sandbox(base_image) as sandbox:
        forward = await port_forwarding(sandbox).serve_port(_Shout)
        results = await asyncio.gather(
            *(sandbox.exec(SERVED.format(port=forward.port)) for _ in range(3))
        )
        for result in results:  # cat ends: the protocol's close reached the program
            assert (result.exit_code, result.stdout) == (0, "echo:HELLO\necho:BYE\n")
        await forward.aclose()
        assert (await sandbox.exec(SERVED.format(port=forward.port))).exit_code != 0


CALL = """exec 3<>/dev/tcp/127.0.0.1/{port} || exit 9
body='{body}'
printf 'POST /v1/chat/completions HTTP/1.1\\r\\nConnection: close\\r\\n' >&3
printf 'Content-Length: %d\\r\\n\\r\\n%s' "${{#body}}" "$body" >&3
cat <&3"""


async def test_the_capture_endpoint_served_through_the_relay_records_exact_tokens(
    base_image: str,
) -> None:
    fake = FakeVLLM(commands=["ls"])
    ask = {"model": "m", "messages": [{"role": "user", "content": "go"}]}
    async with (
        PolicyServer(fake) as server,
        OpenAIPolicy(server.base_url, "m", capture=CaptureOptions(profile="vllm")) as client,
        _sandbox(base_image) as sandbox,
    ):
        session = CaptureSession(client, sampling=SamplingParams(), limits=CaptureLimits())
        async with CaptureServer(session, model="policy", listen=False) as capture:
            forward = await port_forwarding(sandbox).serve_port(capture.protocol)
            plain = await sandbox.exec(CALL.format(port=forward.port, body=json.dumps(ask)))
            streamed = await sandbox.exec(
                CALL.format(port=forward.port, body=json.dumps(ask | {"stream": True}))
            )
            await forward.aclose()
    head, answer = plain.stdout.split("\r\n\r\n", 1)
    assert head.startswith("HTTP/1.1 200 OK")
    [call] = json.loads(answer)["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"command": "ls"}
    assert "Transfer-Encoding: chunked" in streamed.stdout
    events = [json.loads(line[6:]) for line in streamed.stdout.split("\n") if "data: {" in line]
    [streamed_call] = [c for e in events for c in e["choices"][0]["delta"].get("tool_calls", [])]
    assert json.loads(streamed_call["function"]["arguments"]) == {"command": "ls"}
    assert streamed.stdout.rstrip().endswith("data: [DONE]\n\n\r\n0")
    for turn, reply in zip(session.turns, fake.replies, strict=True):
        assert isinstance(reply.body, dict)
        assert turn.completion_token_ids == reply.body["choices"][0]["token_ids"]
