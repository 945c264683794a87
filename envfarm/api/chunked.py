"""An answer whose body is in memory as chunks, written a chunk at a time under its
``Content-Length``.

A long-poll page is megabytes. Handed to the server as one body, it is first joined from its
groups, and then the transport copies whatever the socket does not take at once into a buffer
of its own: two copies of the page, each a fresh block of megabytes that the kernel maps and
zeroes page by page. Written a group at a time, each chunk goes to the socket as the
connection drains (the server waits while the transport's buffer is full), and nothing the
size of the page is made.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.responses import Response
from starlette.types import Receive, Scope, Send


class ChunkedResponse(Response):
    def __init__(
        self,
        chunks: list[bytes],
        *,
        headers: Mapping[str, str] | None = None,
        media_type: str | None = None,
    ) -> None:
        self.chunks = chunks
        super().__init__(b"", headers=headers, media_type=media_type)
        self.headers["content-length"] = str(sum(map(len, chunks)))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = {"type": "http.response.start", "status": self.status_code}
        await send({**start, "headers": self.raw_headers})
        for index, chunk in enumerate(self.chunks):
            more = index < len(self.chunks) - 1
            await send({"type": "http.response.body", "body": chunk, "more_body": more})
        if not self.chunks:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
