"""A server-sent events parser fed with raw chunks (a group's ``data`` line may be megabytes,
beyond what line-oriented stream readers accept)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    event: str
    data: str
    id: str | None


class EventParser:
    """Feed bytes as they arrive; get back each event once its blank line has been seen."""

    def __init__(self) -> None:
        self._pending = b""
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None
        self.retry_ms: int | None = None

    def feed(self, chunk: bytes) -> list[Event]:
        self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        events = []
        for raw in lines:
            event = self._line(raw.removesuffix(b"\r").decode("utf-8"))
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> Event | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        elif name == "retry" and value.isdigit():
            self.retry_ms = int(value)
        return None

    def _dispatch(self) -> Event | None:
        if not self._data and not self._event:
            return None
        event = Event(event=self._event or "message", data="\n".join(self._data), id=self._id)
        self._event, self._data = "", []
        return event
