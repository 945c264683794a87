"""The sandbox channel's framing, error mapping and client, without a container.

The client tests put a ``Channel`` on one end of a real socketpair and play the helper on the
other end (the engine's multiplexing included), so they exercise the actual byte stream.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import socket
import struct
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from envfarm.errors import SandboxError, SandboxGone
from envfarm.sandbox.channel.client import Channel, ExecOutcome, answer_error
from envfarm.sandbox.channel.protocol import (
    MAX_HEADER,
    FrameDecoder,
    StreamDemuxer,
    encode_frame,
    frame_head,
)


def _mux(stream: int, data: bytes) -> bytes:
    return struct.pack(">BxxxI", stream, len(data)) + data


def test_frames_round_trip_whatever_the_chunking() -> None:
    payload = os.urandom(5000) + b"\x00\xff"
    stream = encode_frame({"id": 1, "type": "data"}, payload) + encode_frame({"id": 2, "x": "é"})
    for size in (1, 7, 8, 13, 4096, len(stream)):
        decoder = FrameDecoder()
        frames = []
        for start in range(0, len(stream), size):
            frames += decoder.feed(stream[start : start + size])
        assert frames == [({"id": 1, "type": "data"}, payload), ({"id": 2, "x": "é"}, b"")]
        assert decoder.pending == 0


def test_frame_head_is_prefix_then_json() -> None:
    head = frame_head({"id": 3, "op": "ping"}, 10)
    header_len, payload_len = struct.unpack(">II", head[:8])
    assert (header_len, payload_len) == (len(head) - 8, 10)
    assert json.loads(head[8:]) == {"id": 3, "op": "ping"}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (struct.pack(">II", 0, 0), "malformed frame"),
        (struct.pack(">II", MAX_HEADER + 1, 0), "malformed frame"),
        (struct.pack(">II", 3, 0) + b"{x}", "not JSON"),
        (struct.pack(">II", 2, 0) + b"[]", "integer id"),
        (struct.pack(">II", 12, 0) + b'{"id": "1"} ', "integer id"),
    ],
)
def test_malformed_frames_are_errors(raw: bytes, message: str) -> None:
    with pytest.raises(SandboxError, match=message):
        FrameDecoder().feed(raw)


def test_oversized_headers_are_refused_when_encoding() -> None:
    with pytest.raises(SandboxError, match="exceeds"):
        frame_head({"id": 1, "blob": "x" * MAX_HEADER})


def test_demuxer_splits_streams_across_feeds() -> None:
    stream = _mux(1, b"frames") + _mux(2, b"diagnostics") + _mux(1, b"") + _mux(1, b"more")
    for size in (1, 3, 9, 14, len(stream)):
        demux = StreamDemuxer()
        received: dict[int, bytes] = {1: b"", 2: b""}
        for start in range(0, len(stream), size):
            for kind, piece in demux.feed(stream[start : start + size]):
                received[kind] += piece
        assert received == {1: b"framesmore", 2: b"diagnostics"}
    with pytest.raises(SandboxError, match="stream type 9"):
        StreamDemuxer().feed(struct.pack(">BxxxI", 9, 0))


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (errno.ENOENT, FileNotFoundError),
        (errno.EISDIR, IsADirectoryError),
        (errno.EACCES, PermissionError),
        (errno.ENOTDIR, NotADirectoryError),
        (errno.EROFS, OSError),
    ],
)
def test_file_errors_become_os_errors_by_errno(code: int, expected: type[OSError]) -> None:
    error = answer_error({"id": 1, "type": "error", "errno": code, "message": "m"}, "/p")
    assert type(error) is expected
    assert (error.errno, error.strerror, error.filename) == (code, "m", "/p")


def test_other_answers_become_sandbox_errors() -> None:
    shutting = {"id": 1, "type": "error", "errno": errno.ESHUTDOWN, "message": "bye"}
    assert isinstance(answer_error(shutting, "/p"), SandboxGone)
    refused = answer_error({"id": 1, "type": "error", "errno": 22, "message": "bad"}, None)
    assert type(refused) is SandboxError
    assert "bad" in str(refused)
    assert "unexpected answer" in str(answer_error({"id": 1, "type": "pong"}, "/p"))


def test_exit_codes_follow_docker_exec() -> None:
    def outcome(**fields: object) -> ExecOutcome:
        return ExecOutcome.model_validate({"stdout": b"", "stderr": b"", **fields})

    assert outcome(exit_code=3).docker_exit_code() == 3
    assert outcome(exit_code=None, signal=9).docker_exit_code() == 137
    assert outcome(exit_code=None, signal=9, timed_out=True).docker_exit_code() is None


class FakeHelper:
    """The helper's side of a socketpair: reads request frames, answers muxed frames."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.decoder = FrameDecoder()

    async def requests(self, count: int) -> list[tuple[dict[str, object], bytes]]:
        loop = asyncio.get_running_loop()
        frames: list[tuple[dict[str, object], bytes]] = []
        while len(frames) < count:
            data = await loop.sock_recv(self.sock, 65536)
            assert data, "the client closed the stream"
            frames += self.decoder.feed(data)
        return frames

    async def answer(
        self, header: dict[str, object], payload: bytes = b"", stream: int = 1
    ) -> None:
        await asyncio.get_running_loop().sock_sendall(
            self.sock, _mux(stream, encode_frame(header, payload))
        )


@pytest_asyncio.fixture(loop_scope="session")
async def pair() -> AsyncIterator[tuple[Channel, FakeHelper]]:
    client_sock, helper_sock = socket.socketpair()
    helper_sock.setblocking(False)
    channel = await Channel.connect(client_sock, "fake")
    yield channel, FakeHelper(helper_sock)
    channel.close()
    helper_sock.close()


async def test_channel_matches_answers_to_requests_in_any_order(
    pair: tuple[Channel, FakeHelper],
) -> None:
    channel, helper = pair
    first = asyncio.create_task(channel.exec("one", env={"A": "1"}, timeout=5))
    second = asyncio.create_task(channel.read_file("/f"))
    (exec_req, _), (read_req, _) = await helper.requests(2)
    assert exec_req["command"] == "one"
    assert exec_req["env"] == {"A": "1"}
    assert exec_req["timeout_s"] == 5
    await helper.answer({"id": read_req["id"], "type": "data"}, b"\x00file")
    await helper.answer({"id": exec_req["id"], "type": "stdout"}, b"out")
    await helper.answer({"id": read_req["id"], "type": "done", "size": 5})
    assert await second == b"\x00file"
    await helper.answer({"id": exec_req["id"], "type": "stderr"}, b"err")
    await helper.answer({"id": exec_req["id"], "type": "exit", "exit_code": 0, "signal": None})
    outcome = await first
    assert (outcome.stdout, outcome.stderr, outcome.exit_code) == (b"out", b"err", 0)


async def test_large_writes_go_out_in_chunks_ending_with_eof(
    pair: tuple[Channel, FakeHelper],
) -> None:
    channel, helper = pair
    data = os.urandom(2 * 1024 * 1024 + 10)
    write = asyncio.create_task(channel.write_file("/big", data, mode=0o600))
    frames = await helper.requests(3)
    assert [header["op"] for header, _ in frames] == ["write_file", "write_data", "write_data"]
    assert [header["eof"] for header, _ in frames] == [False, False, True]
    assert frames[0][0]["mode"] == 0o600
    assert b"".join(payload for _, payload in frames) == data
    await helper.answer({"id": frames[0][0]["id"], "type": "done", "size": len(data)})
    await write


async def test_cancelling_a_request_sends_cancel(pair: tuple[Channel, FakeHelper]) -> None:
    channel, helper = pair
    task = asyncio.create_task(channel.exec("sleep 100"))
    [(request, _)] = await helper.requests(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [(cancel, _)] = await helper.requests(1)
    assert cancel == {"id": request["id"], "op": "cancel"}
    await helper.answer({"id": request["id"], "type": "exit", "exit_code": None, "signal": 9})
    await helper.answer({"id": 0, "type": "pong"}, stream=2)  # diagnostics are not frames
    pong = asyncio.create_task(channel.ping())
    [(ping, _)] = await helper.requests(1)
    await helper.answer({"id": ping["id"], "type": "pong", "version": 1})
    assert (await pong)["version"] == 1


async def test_a_closed_stream_fails_pending_and_later_requests(
    pair: tuple[Channel, FakeHelper],
) -> None:
    channel, helper = pair
    pending = asyncio.create_task(channel.exec("true"))
    await helper.requests(1)
    await helper.answer({"id": 0, "type": "x"}, b"", stream=2)
    await asyncio.get_running_loop().sock_sendall(helper.sock, _mux(2, b"dying words\n"))
    helper.sock.close()
    with pytest.raises(SandboxGone, match="dying words"):
        await pending
    with pytest.raises(SandboxGone):
        await channel.read_file("/x")


async def test_a_garbled_stream_fails_the_channel(pair: tuple[Channel, FakeHelper]) -> None:
    channel, helper = pair
    pending = asyncio.create_task(channel.ping())
    await helper.requests(1)
    await asyncio.get_running_loop().sock_sendall(helper.sock, _mux(1, b"\xff" * 8))
    with pytest.raises(SandboxError, match="malformed frame"):
        await pending
