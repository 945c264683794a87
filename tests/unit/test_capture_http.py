"""The capture endpoint's small HTTP/1.1 server, on real loopback sockets, byte for byte."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio

from envfarm.agent.capture.http import MAX_HEAD, Answer, HttpServer, Request

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def _echo(request: Request) -> Answer:
    if request.path == "/boom":
        raise RuntimeError("a bug")
    if request.path == "/slow":
        await asyncio.sleep(0.05)
    body = json.dumps(
        {"method": request.method, "path": request.path, "body": request.body.decode()}
    )
    return Answer(200, body.encode(), streamed=request.path == "/stream")


def _error(status: int, message: str) -> bytes:
    return json.dumps({"error": {"message": message, "status": status}}).encode()


@pytest_asyncio.fixture(loop_scope="session")
async def port() -> AsyncIterator[int]:
    server = HttpServer(_echo, _error)
    yield await server.listen("127.0.0.1")
    await server.aclose()


async def _exchange(port: int, raw: bytes, *, read_until_close: bool = True) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10) if read_until_close else b""
    writer.close()
    return data


def _post(path: str, body: bytes, extra: str = "") -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    return head.encode() + body


async def test_keep_alive_requests_are_answered_in_order_and_close_ends_the_connection(
    port: int,
) -> None:
    pipelined = _post("/slow", b"one") + _post("/a", b"two", "Connection: close\r\n")
    data = await _exchange(port, pipelined)
    answers = data.split(b"HTTP/1.1 200 OK\r\n")[1:]
    assert len(answers) == 2
    assert b'"body": "one"' in answers[0]
    assert b'"body": "two"' in answers[1]
    assert b"Connection: close" in answers[1]
    assert b"Connection: close" not in answers[0]


async def test_a_chunked_body_with_trailers_is_read_whole(port: int) -> None:
    raw = (
        b"POST /c?x=1 HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        b"3;ext=1\r\nabc\r\n4\r\ndefg\r\n0\r\nTrailer: t\r\n\r\n"
    )
    data = await _exchange(port, raw)
    assert b'"path": "/c"' in data
    assert b'"body": "abcdefg"' in data


async def test_expect_continue_is_answered_before_the_body_is_sent(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /e HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
    assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10) == (
        b"HTTP/1.1 100 Continue\r\n\r\n"
    )
    writer.write(b"hi")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 200 OK")
    writer.close()


async def test_gzip_bodies_are_decoded_and_http_1_0_closes_by_default(port: int) -> None:
    body = gzip.compress(b"squeezed")
    head = f"POST /z HTTP/1.0\r\nContent-Encoding: gzip\r\nContent-Length: {len(body)}\r\n\r\n"
    data = await _exchange(port, head.encode() + body)
    assert b'"body": "squeezed"' in data
    assert b"Connection: close" in data


async def test_malformed_requests_get_a_clear_error_and_the_connection_closes(port: int) -> None:
    cases = {
        b"NONSENSE\r\n\r\n": b"400 Bad Request",
        b"POST / HTTP/1.1\r\nContent-Length: many\r\n\r\n": b"400 Bad Request",
        b"POST / HTTP/1.1\r\nbad header\r\n\r\n": b"400 Bad Request",
        b"POST / HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n": b"413 Request Entity Too Large",
        b"POST / HTTP/1.1\r\nContent-Encoding: br\r\nContent-Length: 1\r\n\r\nx": b"415",
        b"GET / HTTP/1.1\r\nX: " + b"y" * MAX_HEAD + b"\r\n\r\n": b"431",
    }
    for raw, status in cases.items():
        data = await _exchange(port, raw)
        assert data.startswith(b"HTTP/1.1 " + status), (raw[:40], data[:80])
        assert b"Connection: close" in data
        assert json.loads(data.split(b"\r\n\r\n", 1)[1])["error"]["message"]


async def test_a_handler_bug_is_a_500_and_a_stream_is_one_chunk(port: int) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(f"http://127.0.0.1:{port}/boom", data=b"x") as response:
            assert response.status == 500
            assert "failed" in (await response.json())["error"]["message"]
        async with http.post(f"http://127.0.0.1:{port}/stream", data=b"x") as response:
            assert response.headers["Transfer-Encoding"] == "chunked"
            assert (await response.json())["body"] == "x"
        async with http.head(f"http://127.0.0.1:{port}/h") as response:
            assert response.status == 200
            assert int(response.headers["Content-Length"]) > 0


async def test_closing_the_server_lets_the_answer_under_way_finish() -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def held(request: Request) -> Answer:
        started.set()
        await release.wait()
        return Answer(200, request.body)

    server = HttpServer(held, _error)
    port = await server.listen("127.0.0.1")
    idle_reader, _ = await asyncio.open_connection("127.0.0.1", port)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_post("/held", b"late"))
    await started.wait()
    closing = asyncio.create_task(server.aclose())
    assert await asyncio.wait_for(idle_reader.read(), 10) == b""  # an idle one just closes
    assert not closing.done()
    release.set()
    answer = await asyncio.wait_for(reader.read(), 10)
    assert answer.startswith(b"HTTP/1.1 200 OK")
    assert b"Connection: close" in answer
    assert answer.endswith(b"\r\n\r\nlate")
    await closing
    writer.close()
