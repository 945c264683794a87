"""The wire details of ``rest.RestKubeApi``: HTTP failures as ``KubeError``s, and the
remote-command channel protocol of an attach or exec WebSocket (``v5.channel.k8s.io``,
``v4`` accepted): every binary message starts with its channel byte (0 stdin, 1 stdout,
2 stderr, 3 the final status); v5 closes stdin with the message ``255, 0``."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import aiohttp

from envfarm.errors import (
    KubeConflict,
    KubeError,
    KubeGone,
    KubeInvalid,
    KubeNotFound,
    KubeUnavailable,
)

CHANNEL_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN_CHUNK = 256 * 1024
_BY_STATUS: dict[int, type[KubeError]] = {
    400: KubeInvalid,
    404: KubeNotFound,
    409: KubeConflict,
    410: KubeGone,
    422: KubeInvalid,
    429: KubeUnavailable,
}


def translate(status: int, body: Any, what: str) -> KubeError:
    """The ``KubeError`` for an HTTP status and the server's ``Status`` object (if any)."""
    if isinstance(body, dict) and body.get("kind") == "Status":
        message, reason = str(body.get("message") or ""), str(body.get("reason") or "")
    else:
        message, reason = str(body)[:500] if body else "", ""
    if status == 401:  # the server says only "Unauthorized"
        message = (
            "the API server refused the credentials (a token that expired or was revoked, or "
            "the one a kubeconfig's credential plugin printed)"
        )
    kind = _BY_STATUS.get(status) or (KubeUnavailable if status >= 500 else KubeError)
    text = f"{what}: {status} {reason or kind.__name__}: {message}".rstrip(": ")
    return kind(text, status=status, reason=reason)


class WebSocketPodStream:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.status: dict[str, Any] | None = None
        """The final status (channel 3) once the stream has ended."""

    async def send(self, data: bytes) -> None:
        for start in range(0, len(data), STDIN_CHUNK):
            await self.ws.send_bytes(b"\x00" + data[start : start + STDIN_CHUNK])

    async def receive(self) -> tuple[int, bytes] | None:
        while True:
            message = await self.ws.receive()
            if message.type != aiohttp.WSMsgType.BINARY:
                return None  # closed, closing or an error: the stream is over
            data: bytes = message.data
            if not data:
                continue
            channel, payload = data[0], data[1:]
            if channel in (1, 2) and payload:
                return channel, payload
            if channel == 3:
                self.status = json.loads(payload or b"{}")

    async def close(self) -> None:
        if self.ws.protocol == CHANNEL_PROTOCOLS[0] and not self.ws.closed:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.ws.send_bytes(b"\xff\x00")  # v5: close stdin
        await self.ws.close()
