"""Watch events of the in-memory API: a bounded history and a fan-out to live watchers.

Like the API server's watch cache: every change gets the store's next resourceVersion and is
kept in a window of the most recent ``history`` events; a watch from a version older than the
window fails with ``KubeGone`` (410), and so does a watcher that falls ``buffer`` events behind
(the server drops slow watchers). A watch with a label selector sees an object that starts
matching as ADDED and one that stops matching as DELETED (with its previous content, so the
labels that selected it are still there), as the server's cacher does.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from envfarm.errors import KubeGone
from envfarm.k8s.api import EventType, KubeObject
from envfarm.k8s.objects import labels_of
from envfarm.testing.k8s.selectors import FieldSelector, LabelSelector


@dataclass(frozen=True)
class StoredEvent:
    rv: int
    type: EventType
    key: str
    """The resource type's key (``pods``, ``envpools.envfarm.dev``)."""
    namespace: str
    obj: KubeObject
    """The object after the change (for DELETED, its last state). Never mutated."""
    old: KubeObject | None = None


class _End:
    pass


END = _End()


@dataclass(eq=False)
class Watcher:
    key: str
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector
    queue: asyncio.Queue[StoredEvent | _End | KubeGone] = field(default_factory=asyncio.Queue)

    def selects(self, obj: KubeObject) -> bool:
        return self.labels.matches(labels_of(obj)) and self.fields.matches(obj)

    def wants(self, event: StoredEvent) -> bool:
        return event.key == self.key and self.namespace in (None, event.namespace)

    def translate(self, event: StoredEvent) -> tuple[EventType, KubeObject] | None:
        """What this watcher sees of ``event`` (None: nothing)."""
        now = self.selects(event.obj)
        if event.type in ("ADDED", "DELETED"):
            return (event.type, event.obj) if now else None
        before = event.old is not None and self.selects(event.old)
        if now:
            return ("MODIFIED" if before else "ADDED", event.obj)
        if not before or event.old is None:
            return None
        # As the API server's cacher does: the previous content, at the event's version.
        last = dict(event.old)
        last["metadata"] = {**event.old["metadata"], "resourceVersion": str(event.rv)}
        return ("DELETED", last)


class WatchHub:
    def __init__(self, history: int = 10_000, buffer: int = 100_000) -> None:
        self.history = history
        self.buffer = buffer
        self._events: deque[StoredEvent] = deque()
        self._compacted = 0
        """The newest resourceVersion no longer in the window (0: nothing dropped)."""
        self._watchers: set[Watcher] = set()

    @property
    def oldest_kept(self) -> int:
        return self._compacted

    def emit(self, event: StoredEvent) -> None:
        self._events.append(event)
        while len(self._events) > self.history:
            self._compacted = self._events.popleft().rv
        for watcher in list(self._watchers):
            if watcher.wants(event):
                if watcher.queue.qsize() >= self.buffer:
                    self._watchers.discard(watcher)
                    watcher.queue.put_nowait(_too_slow())
                else:
                    watcher.queue.put_nowait(event)

    def since(self, rv: int, key: str) -> list[StoredEvent]:
        """Events of ``key`` after ``rv``; KubeGone when some may have been dropped."""
        if rv < self._compacted:
            raise KubeGone(
                f"too old resource version: {rv} (the oldest kept is {self._compacted + 1})",
                status=410,
                reason="Expired",
            )
        return [e for e in self._events if e.rv > rv and e.key == key]

    def subscribe(self, watcher: Watcher) -> None:
        self._watchers.add(watcher)

    def unsubscribe(self, watcher: Watcher) -> None:
        self._watchers.discard(watcher)

    def compact(self) -> None:
        """Drop the whole history: every watch from an older version gets 410 Gone."""
        if self._events:
            self._compacted = self._events[-1].rv
        self._events.clear()

    def close_all(self) -> None:
        """End every open watch, as an API server restart or timeout would."""
        for watcher in self._watchers:
            watcher.queue.put_nowait(END)
        self._watchers.clear()


def _too_slow() -> KubeGone:
    return KubeGone(
        "the watch fell too far behind and was closed; list again and watch from there",
        status=410,
        reason="Expired",
    )
