"""The capture endpoint's HTTP/1.1 server: a plain asyncio protocol for its few routes.

Why not aiohttp's server, which it replaced: per call that cost about 0.3 ms of CPU (request
and response objects, router, a stream and a task per request) on a path whose overhead the
capture endpoint keeps under 2 ms; and a plain protocol can be served straight from the port
relay's frames, with no socket on envfarm's side (``sandbox.forwarding.serve_port``), which
saves a loopback hop each way.

What it speaks: HTTP/1.0 and 1.1, keep-alive (1.1's default; ``Connection: close`` ends it),
bodies by ``Content-Length`` or chunked, ``Expect: 100-continue``, gzip and deflate request
bodies. Requests on one connection are answered in order, one at a time. Every answer is one
write: head and body, a streamed one (server-sent events, all known when the completion is) as
one chunk. Limits: a head of 64 KiB (431), a body of 64 MiB (413); a malformed request gets a
400 and its connection is closed. A handler's bug is a 500 (logged). A connection lost while
its request is handled does not cancel the handler: the call is forwarded and recorded all
the same; closing the server waits for the requests under way (up to ``SHUTDOWN_S``, as
aiohttp's server did), then closes every connection.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus

log = logging.getLogger(__name__)

MAX_HEAD = 64 << 10
MAX_BODY = 64 << 20
SHUTDOWN_S = 60.0
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    """The target without its query string."""
    headers: dict[str, str]
    """Names lower-cased."""
    body: bytes


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    content_type: str = "application/json"
    streamed: bool = False
    """Sent chunked, as a stream of events is."""


Handler = Callable[[Request], Awaitable[Answer]]
ErrorBody = Callable[[int, str], bytes]


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class HttpConnection(asyncio.Protocol):
    """One client connection (a TCP socket, or a relayed connection served in process)."""

    def __init__(self, handler: Handler, error_body: ErrorBody, live: set[HttpConnection]):
        self._handler, self._error_body, self._live = handler, error_body, live
        self._transport: asyncio.BaseTransport | None = None
        self._buffer = bytearray()
        self._head: tuple[str, str, str, dict[str, str]] | None = None
        self._chunks: _Chunked | None = None
        self._task: asyncio.Task[None] | None = None
        self._eof = self._closed = self._stopping = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._live.add(self)

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self._buffer += data
        if self._task is None:
            self._advance()

    def eof_received(self) -> bool:
        self._eof = True
        if self._task is None:
            self.close()
        return True  # keep the transport: an answer under way still goes out

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._live.discard(self)

    def close(self) -> None:
        self._closed = True
        if self._transport is not None:
            self._transport.close()

    def stop(self) -> asyncio.Task[None] | None:
        """Take no more requests: close now when idle, else after the answer under way (the
        task returned)."""
        self._stopping = True
        if self._task is None:
            self.close()
        return self._task

    def abort(self) -> None:
        """Close, and cancel the request under way."""
        self.close()
        if self._task is not None:
            self._task.cancel()

    def _write(self, data: bytes) -> None:
        if not self._closed and isinstance(self._transport, asyncio.WriteTransport):
            self._transport.write(data)

    def _advance(self) -> None:
        """Start the next complete request, answer a malformed one, or wait for more bytes."""
        try:
            request = self._next_request()
        except _Refused as refused:
            self._answer(Answer(refused.status, self._error_body(refused.status, str(refused))))
            self.close()
            return
        if request is not None:
            self._task = asyncio.get_running_loop().create_task(self._handle(*request))
        elif self._eof:
            self.close()

    def _next_request(self) -> tuple[Request, str, bool] | None:
        if self._head is None:
            self._head = self._parse_head()
            if self._head is None:
                return None
        method, target, version, headers = self._head
        body = self._read_body(headers)
        if body is None:
            if headers.get("expect", "").lower() == "100-continue" and version == "HTTP/1.1":
                headers.pop("expect")
                self._write(_CONTINUE)
            return None
        self._head, self._chunks = None, None
        connection = headers.get("connection", "").lower()
        keep = "close" not in connection and (version == "HTTP/1.1" or "keep-alive" in connection)
        path = target.split("?", 1)[0]
        return Request(method, path, headers, _decoded(body, headers)), version, keep

    def _parse_head(self) -> tuple[str, str, str, dict[str, str]] | None:
        while self._buffer.startswith(b"\r\n"):  # empty lines before a request are ignored
            del self._buffer[:2]
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > MAX_HEAD:
                raise _Refused(431, f"the request head exceeds {MAX_HEAD} bytes")
            return None
        if end > MAX_HEAD:
            raise _Refused(431, f"the request head exceeds {MAX_HEAD} bytes")
        lines = self._buffer[:end].decode("latin-1").split("\r\n")
        del self._buffer[: end + 4]
        parts = lines[0].split(" ")
        if len(parts) != 3 or parts[2] not in ("HTTP/1.0", "HTTP/1.1") or not parts[1]:
            raise _Refused(400, f"malformed request line {lines[0][:200]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise _Refused(400, f"malformed header line {line[:200]!r}")
            key = name.lower()
            value = value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        return parts[0], parts[1], parts[2], headers

    def _read_body(self, headers: dict[str, str]) -> bytes | None:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            if self._chunks is None:
                self._chunks = _Chunked()
            return self._chunks.feed(self._buffer)
        declared = headers.get("content-length", "0").strip() or "0"
        if not declared.isdigit():
            raise _Refused(400, f"malformed Content-Length {declared[:40]!r}")
        size = int(declared)
        if size > MAX_BODY:
            raise _Refused(413, f"the request body of {size} bytes exceeds {MAX_BODY}")
        if len(self._buffer) < size:
            return None
        body = bytes(self._buffer[:size])
        del self._buffer[:size]
        return body

    async def _handle(self, request: Request, version: str, keep: bool) -> None:
        try:
            answer = await self._handler(request)
        except Exception:
            log.exception("the capture endpoint failed on %s %s", request.method, request.path)
            answer = Answer(500, self._error_body(500, "the capture endpoint failed"))
        self._task = None
        keep = keep and not self._stopping
        self._answer(answer, version=version, keep=keep, head_only=request.method == "HEAD")
        if not keep:
            self.close()
        elif not self._closed:
            self._advance()

    def _answer(
        self,
        answer: Answer,
        *,
        version: str = "HTTP/1.1",
        keep: bool = False,
        head_only: bool = False,
    ) -> None:
        reason = HTTPStatus(answer.status).phrase
        body = answer.body
        lines = [f"HTTP/1.1 {answer.status} {reason}", f"Content-Type: {answer.content_type}"]
        if answer.streamed and version == "HTTP/1.1":
            lines.append("Transfer-Encoding: chunked")
            body = (b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)) if body else b"0\r\n\r\n"
        else:
            lines.append(f"Content-Length: {len(body)}")
        if not keep:
            lines.append("Connection: close")
        elif version == "HTTP/1.0":
            lines.append("Connection: keep-alive")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self._write(head if head_only else head + body)


class _Chunked:
    """An incremental decoder of a chunked body (trailers read and dropped)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self.left = 0
        self.trailers = False

    def feed(self, buffer: bytearray) -> bytes | None:
        while True:
            if self.left:
                if len(buffer) < self.left + 2:
                    return None
                if buffer[self.left : self.left + 2] != b"\r\n":
                    raise _Refused(400, "malformed chunked body: a chunk is not followed by CRLF")
                self.parts.append(bytes(buffer[: self.left]))
                del buffer[: self.left + 2]
                self.left = 0
            end = buffer.find(b"\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD:
                    raise _Refused(400, "malformed chunked body: a chunk line is too long")
                return None
            line = bytes(buffer[:end])
            del buffer[: end + 2]
            if self.trailers:
                if not line:
                    return b"".join(self.parts)
                continue
            try:
                self.left = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise _Refused(400, f"malformed chunk size {line[:40]!r}") from None
            self.size += self.left
            if self.size > MAX_BODY:
                raise _Refused(413, f"the request body exceeds {MAX_BODY} bytes")
            if self.left == 0:
                self.trailers = True


def _decoded(body: bytes, headers: dict[str, str]) -> bytes:
    encoding = headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise _Refused(415, f"unsupported Content-Encoding {encoding[:40]!r}")
    wbits = 16 + zlib.MAX_WBITS if encoding != "deflate" else zlib.MAX_WBITS
    try:
        inflater = zlib.decompressobj(wbits)
        data = inflater.decompress(body, MAX_BODY + 1)
    except zlib.error as exc:
        raise _Refused(400, f"the {encoding} request body does not decode: {exc}") from None
    if len(data) > MAX_BODY:
        raise _Refused(413, f"the decoded request body exceeds {MAX_BODY} bytes")
    return data


class HttpServer:
    """Connections served by ``handler``; ``protocol`` makes one (for a socket or the relay)."""

    def __init__(self, handler: Handler, error_body: ErrorBody) -> None:
        self._handler, self._error_body = handler, error_body
        self._live: set[HttpConnection] = set()
        self._server: asyncio.Server | None = None

    def protocol(self) -> HttpConnection:
        return HttpConnection(self._handler, self._error_body, self._live)

    async def listen(self, host: str, port: int = 0) -> int:
        """Also accept TCP connections on ``host:port``; the port listened on."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self.protocol, host, port)
        return int(self._server.sockets[0].getsockname()[1])

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        under_way = [task for c in list(self._live) if (task := c.stop()) is not None]
        if under_way:
            await asyncio.wait(under_way, timeout=SHUTDOWN_S)
        for connection in list(self._live):
            connection.abort()
        if self._server is not None:
            await self._server.wait_closed()
