"""List-then-watch with a local cache: one stream per resource type, shared by every consumer.

``Informer.run`` lists the objects (filtered by namespace and label selector), then watches
from the list's resourceVersion, keeping ``cache`` current and calling ``on_event(type, obj)``
for each change. A watch the server ends is resumed from the last version seen; a 410 Gone
(the version fell out of the server's history) or any other API error leads to a fresh list,
after ``retry_s`` for errors, and the differences between the old cache and the new list are
reported as events, so consumers never miss a deletion that happened while disconnected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from envfarm.errors import KubeError, KubeGone
from envfarm.k8s.api import EventType, KubeApi, KubeObject, ResourceLike
from envfarm.k8s.objects import resource_version

Handler = Callable[[EventType, KubeObject], None]
ObjectKey = tuple[str, str]
"""(namespace, name)."""

log = logging.getLogger(__name__)


def object_key(obj: KubeObject) -> ObjectKey:
    metadata = obj.get("metadata", {})
    return (str(metadata.get("namespace", "")), str(metadata.get("name", "")))


class Informer:
    def __init__(
        self,
        api: KubeApi,
        resource: ResourceLike,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        on_event: Handler | None = None,
        retry_s: float = 1.0,
    ) -> None:
        self.api = api
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.handlers: list[Handler] = [on_event] if on_event is not None else []
        self.retry_s = retry_s
        self.cache: dict[ObjectKey, KubeObject] = {}
        self.synced = asyncio.Event()
        self.lists = 0
        """How many times it listed (1 + one per 410 Gone or error)."""
        self.last_error: KubeError | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.run(), name="informer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _emit(self, kind: EventType, obj: KubeObject) -> None:
        for handler in self.handlers:
            try:
                handler(kind, obj)
            except Exception:  # a consumer's bug must not stop the stream for the others
                log.exception("informer handler failed on %s %s", kind, object_key(obj))

    async def _relist(self) -> str:
        listing = await self.api.list(
            self.resource, self.namespace, label_selector=self.label_selector
        )
        self.lists += 1
        fresh = {object_key(obj): obj for obj in listing.items}
        old, self.cache = self.cache, fresh
        for key, obj in old.items():
            if key not in fresh:
                self._emit("DELETED", obj)
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None:
                self._emit("ADDED", obj)
            elif resource_version(before) != resource_version(obj):
                self._emit("MODIFIED", obj)
        self.synced.set()
        return listing.resource_version

    async def run(self) -> None:
        while True:
            try:
                version = await self._relist()
                while True:
                    stream = self.api.watch(
                        self.resource,
                        self.namespace,
                        resource_version=version,
                        label_selector=self.label_selector,
                    )
                    async for event in stream:
                        if event.type == "BOOKMARK":
                            version = resource_version(event.object) or version
                            continue
                        key = object_key(event.object)
                        if event.type == "DELETED":
                            self.cache.pop(key, None)
                        else:
                            self.cache[key] = event.object
                        version = resource_version(event.object) or version
                        self._emit(event.type, event.object)
            except KubeGone as exc:
                self.last_error = exc
            except KubeError as exc:
                self.last_error = exc
                log.warning("watch of %s failed, listing again: %s", self.resource, exc)
                await asyncio.sleep(self.retry_s)
