"""A page's body kept as the chunks it arrived in, sliced without joining them first.

A long-poll page is megabytes, and the client parses it a group at a time from the spans the
server names (``Envfarm-Group-Spans``). Joining the chunks into one body and then slicing each
group out of it copies every byte twice, and the joined body is a fresh multi-megabyte block
the allocator maps from the kernel page by page (about a fifth of a packed page's parse time
in the client). ``Chunks`` slices a group straight out of the chunk or chunks it lies in: one
copy, of a group's size. ``bytes(chunks)`` joins them when the page is parsed whole after all.
"""

from __future__ import annotations

from bisect import bisect_right


class Chunks:
    """Bytes in pieces, read with ``len()``, ``chunks[start:stop]`` and ``bytes(chunks)``."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = [chunk for chunk in chunks if chunk]
        self._starts: list[int] = []
        size = 0
        for chunk in self._chunks:
            self._starts.append(size)
            size += len(chunk)
        self._size = size

    def __len__(self) -> int:
        return self._size

    def __bytes__(self) -> bytes:
        return b"".join(self._chunks)

    def __getitem__(self, span: slice) -> bytes:
        start, stop, step = span.indices(self._size)
        if step != 1:
            raise ValueError("Chunks slices have no step")
        if start >= stop:
            return b""
        first = bisect_right(self._starts, start) - 1
        last = bisect_right(self._starts, stop - 1) - 1
        if first == last:
            offset = self._starts[first]
            return self._chunks[first][start - offset : stop - offset]
        head = memoryview(self._chunks[first])[start - self._starts[first] :]
        tail = memoryview(self._chunks[last])[: stop - self._starts[last]]
        return b"".join([head, *self._chunks[first + 1 : last], tail])
