"""The server-sent events parser, fed the way a socket delivers: in arbitrary pieces."""

from __future__ import annotations

import json

from envfarm.client.sse import Event, EventParser

STREAM = (
    b"retry: 2000\n\n"
    b": keepalive\n\n"
    b"id: 1\nevent: group\ndata: " + json.dumps({"cursor": 1, "x": "a\nb"}).encode() + b"\n\n"
    b"id: 2\r\nevent: group\r\ndata: first\r\ndata: second\r\n\r\n"
    b"event: end\ndata: {}\n\n"
)
EXPECTED = [
    Event(event="group", data=json.dumps({"cursor": 1, "x": "a\nb"}).encode(), id="1"),
    Event(event="group", data=b"first\nsecond", id="2"),
    Event(event="end", data=b"{}", id="2"),
]


def test_events_parse_whole() -> None:
    parser = EventParser()
    assert parser.feed(STREAM) == EXPECTED
    assert parser.retry_ms == 2000


def test_events_parse_from_any_split() -> None:
    for size in (1, 2, 3, 7, 64):
        parser = EventParser()
        events = []
        for start in range(0, len(STREAM), size):
            events += parser.feed(STREAM[start : start + size])
        assert events == EXPECTED, size


def test_large_data_lines_and_unfinished_events() -> None:
    parser = EventParser()
    payload = "z" * 3_000_000
    assert parser.feed(f"id: 9\nevent: group\ndata: {payload}".encode()) == []
    assert parser.feed(b"\n") == []
    [event] = parser.feed(b"\n")
    assert (event.id, len(event.data)) == ("9", len(payload))


def test_fields_without_values_and_a_space_only_once_stripped() -> None:
    parser = EventParser()
    events = parser.feed(b"data\n\nevent: x\ndata:  two spaces\nretry: soon\nid: a\0b\n\n")
    assert events == [
        Event(event="message", data=b"", id=None),
        Event(event="x", data=b" two spaces", id=None),
    ]
    assert parser.retry_ms is None
