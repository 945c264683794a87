"""Pure framing for the sandbox channel: no I/O, so it is unit-tested on its own.

Two layers, innermost first:

* envfarm's frames (``sandboxd.c`` and ``client.py`` describe the ops): ``u32 header_len |
  u32 payload_len | header | payload``, big endian, the header a JSON object, the payload raw
  bytes (file content and command output never go through base64).
* the engine's stream multiplexing: a non-TTY attach carries stdout and stderr on one
  connection as ``u8 stream | 3 zero bytes | u32 length | data`` records; stdout carries the
  helper's frames, stderr its diagnostics.

Both decoders are incremental: feed them whatever the socket returned.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any

from envfarm.errors import SandboxError

MAX_HEADER = 1 << 20
MAX_PAYLOAD = 16 << 20
STDOUT = 1
STDERR = 2
_PREFIX = struct.Struct(">II")
_MUX = struct.Struct(">BxxxI")

Frame = tuple[dict[str, Any], bytes]


def frame_head(header: Mapping[str, Any], payload_len: int = 0) -> bytes:
    """The length prefix and header of a frame; the payload follows it as is."""
    text = json.dumps(header, separators=(",", ":")).encode()
    if len(text) > MAX_HEADER:
        raise SandboxError(f"frame header of {len(text)} bytes exceeds {MAX_HEADER}")
    if payload_len > MAX_PAYLOAD:
        raise SandboxError(f"frame payload of {payload_len} bytes exceeds {MAX_PAYLOAD}")
    return _PREFIX.pack(len(text), payload_len) + text


def encode_frame(header: Mapping[str, Any], payload: bytes = b"") -> bytes:
    return frame_head(header, len(payload)) + payload


class FrameDecoder:
    """Split a byte stream into ``(header, payload)`` frames."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes | memoryview) -> list[Frame]:
        self._buffer += data
        frames: list[Frame] = []
        view, offset = memoryview(self._buffer), 0
        try:
            while len(view) - offset >= _PREFIX.size:
                header_len, payload_len = _PREFIX.unpack_from(view, offset)
                if not 0 < header_len <= MAX_HEADER or payload_len > MAX_PAYLOAD:
                    raise SandboxError(
                        f"malformed frame: header {header_len} bytes, payload {payload_len} bytes"
                    )
                end = offset + _PREFIX.size + header_len + payload_len
                if len(view) < end:
                    break
                start = offset + _PREFIX.size
                frames.append(
                    (
                        _parse_header(view[start : start + header_len]),
                        bytes(view[end - payload_len : end]),
                    )
                )
                offset = end
        finally:
            view.release()
        del self._buffer[:offset]
        return frames

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held back."""
        return len(self._buffer)


def _parse_header(raw: memoryview) -> dict[str, Any]:
    try:
        header = json.loads(bytes(raw).decode("utf-8", errors="replace"))
    except ValueError as exc:
        raise SandboxError(f"frame header is not JSON: {exc}") from exc
    if not isinstance(header, dict) or not isinstance(header.get("id"), int):
        raise SandboxError(f"frame header must be an object with an integer id: {header!r}")
    return header


class StreamDemuxer:
    """Split the engine's multiplexed attach stream into ``(stream, data)`` pieces.

    Each stream is a byte stream, so record boundaries do not matter: a record split across
    feeds comes out as two pieces. Pieces are views of the fed bytes (no copy); only a record
    header split across feeds is buffered.
    """

    def __init__(self) -> None:
        self._header = bytearray()
        self._stream = 0
        self._left = 0

    def feed(self, data: bytes) -> list[tuple[int, memoryview]]:
        pieces: list[tuple[int, memoryview]] = []
        view, pos = memoryview(data), 0
        while pos < len(view):
            if self._left == 0:
                take = _MUX.size - len(self._header)
                self._header += view[pos : pos + take]
                pos += take
                if len(self._header) < _MUX.size:
                    break
                stream, self._left = _MUX.unpack(self._header)
                self._header.clear()
                if stream > 3:
                    raise SandboxError(f"unexpected stream type {stream} in the engine's stream")
                self._stream = stream
                continue
            take = min(self._left, len(view) - pos)
            pieces.append((self._stream, view[pos : pos + take]))
            pos += take
            self._left -= take
        return pieces
