"""An in-memory Kubernetes API: the fake across the network that tests and benchmarks use.

It keeps the semantics controllers depend on, faithfully enough to find their bugs:

* one resourceVersion counter per store, bumped by every write; ``replace`` and a merge patch
  carrying ``metadata.resourceVersion`` fail with 409 when it is stale (optimistic locking);
  a write that changes nothing is not a write (no new version, no event);
* ``metadata.uid``, ``creationTimestamp``, ``generation`` (bumped when anything outside
  metadata and status changes), ``generateName``; 409 on creating an existing name, 404 on a
  missing one, 422 on invalid names and labels and on pod spec changes Kubernetes forbids;
* the ``status`` subresource (the main resource ignores status, ``status`` ignores the rest)
  and the ``scale`` subresource of resources that declare one;
* finalizers: deleting marks ``deletionTimestamp`` while finalizers remain, removing the last
  one deletes; no new finalizer on an object being deleted;
* owner references: background deletion removes dependents after their last owner, foreground
  deletion (``foregroundDeletion`` finalizer) removes them first, orphan strips references
  (``memory_gc.py``);
* watches with a bounded history and 410 Gone (``memory_watch.py``);
* with a ``SimulatedKubelet`` attached (``kubelet.py``): pods scheduled, started, probed and
  gracefully deleted, and attach streams served by a pluggable container runtime.

Every method yields to the event loop once (``latency_s`` simulates a round trip), then runs
to completion without awaiting: each request is atomic, as it is on the server.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncGenerator, Iterable

from envfarm.errors import KubeConflict, KubeInvalid
from envfarm.k8s.api import (
    PODS,
    Command,
    KubeObject,
    ObjectList,
    PodStream,
    Propagation,
    Resource,
    ResourceLike,
    Subresource,
    WatchEvent,
    resolve,
)
from envfarm.k8s.objects import deep_copy, merge_patch, meta, resource_version
from envfarm.testing.k8s.memory_rules import scale_of
from envfarm.testing.k8s.memory_store import Key, ObjectStore
from envfarm.testing.k8s.memory_watch import END, StoredEvent, Watcher
from envfarm.testing.k8s.selectors import parse_field_selector, parse_label_selector


class MemoryKubeApi(ObjectStore):
    def __init__(
        self,
        *,
        resources: Iterable[Resource] = (),
        history: int = 10_000,
        watch_buffer: int = 100_000,
        latency_s: float = 0.0,
    ) -> None:
        super().__init__(history=history, watch_buffer=watch_buffer)
        self._extra = {(r.api_version, r.kind): r for r in resources}
        self.latency_s = latency_s

    def register(self, resource: Resource) -> None:
        """Serve a custom resource type (as installing its CRD does)."""
        self._extra[(resource.api_version, resource.kind)] = resource

    def _resource(self, resource: ResourceLike) -> Resource:
        found = resolve(resource, self._extra)
        self._by_key.setdefault(found.key, found)
        return found

    async def _request(self, verb: str) -> None:
        self.calls[verb] += 1
        await asyncio.sleep(self.latency_s)

    async def get(
        self,
        resource: ResourceLike,
        namespace: str,
        name: str,
        *,
        subresource: Subresource | None = None,
    ) -> KubeObject:
        await self._request("get")
        res = self._resource(resource)
        current = self.lookup(res, namespace, name)
        return scale_of(res, current) if subresource == "scale" else deep_copy(current)

    async def list(
        self,
        resource: ResourceLike,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ObjectList:
        await self._request("list")
        res = self._resource(resource)
        labels, fields = parse_label_selector(label_selector), parse_field_selector(field_selector)
        items = [
            deep_copy(obj)
            for (ns, _), obj in self.of_kind(res)
            if namespace in (None, ns)
            and labels.matches(obj.get("metadata", {}).get("labels") or {})
            and fields.matches(obj)
        ]
        return ObjectList(items=items, resource_version=str(self._rv))

    async def create(self, resource: ResourceLike, namespace: str, body: KubeObject) -> KubeObject:
        await self._request("create")
        return deep_copy(self.create_now(self._resource(resource), namespace, body))

    async def replace(
        self,
        resource: ResourceLike,
        namespace: str,
        name: str,
        body: KubeObject,
        *,
        subresource: Subresource | None = None,
    ) -> KubeObject:
        await self._request("update")
        res = self._resource(resource)
        return deep_copy(self.replace_now(res, namespace, name, deep_copy(body), subresource))

    async def patch(
        self,
        resource: ResourceLike,
        namespace: str,
        name: str,
        patch: KubeObject,
        *,
        subresource: Subresource | None = None,
    ) -> KubeObject:
        await self._request("patch")
        res = self._resource(resource)
        current = self.lookup(res, namespace, name)
        base = scale_of(res, current) if subresource == "scale" else current
        merged = merge_patch(base, patch)
        if not (patch.get("metadata") or {}).get("resourceVersion"):
            meta(merged)["resourceVersion"] = resource_version(base)
        return deep_copy(self.replace_now(res, namespace, name, merged, subresource))

    async def delete(
        self,
        resource: ResourceLike,
        namespace: str,
        name: str,
        *,
        propagation: Propagation | None = None,
        grace_period_seconds: int | None = None,
        resource_version: str | None = None,
    ) -> KubeObject:
        await self._request("delete")
        res = self._resource(resource)
        current = self.lookup(res, namespace, name)
        if resource_version and resource_version != current["metadata"]["resourceVersion"]:
            raise KubeConflict(
                f'precondition failed for {res.key} "{name}": resourceVersion '
                f"{resource_version} is not {current['metadata']['resourceVersion']}",
                status=409,
                reason="Conflict",
            )
        deleted = self.delete_internal(
            res, current, propagation or "Background", grace_period_seconds
        )
        return deep_copy(deleted)

    async def watch(
        self,
        resource: ResourceLike,
        namespace: str | None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: float | None = None,
    ) -> AsyncGenerator[WatchEvent, None]:
        await self._request("watch")
        res = self._resource(resource)
        watcher = Watcher(
            res.key,
            namespace,
            parse_label_selector(label_selector),
            parse_field_selector(field_selector),
        )
        if resource_version in (None, "", "0"):
            first = [
                StoredEvent(self._rv, "ADDED", res.key, ns, obj)
                for (ns, _), obj in self.of_kind(res)
                if namespace in (None, ns)
            ]
        else:
            first = [
                e
                for e in self.hub.since(_version(resource_version), res.key)
                if namespace in (None, e.namespace)
            ]
        self.hub.subscribe(watcher)
        try:
            for event in first:
                if seen := watcher.translate(event):
                    yield WatchEvent(type=seen[0], object=deep_copy(seen[1]))
            while True:
                try:
                    async with asyncio.timeout(timeout_seconds):
                        item = await watcher.queue.get()
                except TimeoutError:
                    return
                if item is END:
                    return
                if isinstance(item, Exception):
                    raise item
                assert isinstance(item, StoredEvent)
                if seen := watcher.translate(item):
                    yield WatchEvent(type=seen[0], object=deep_copy(seen[1]))
        finally:
            self.hub.unsubscribe(watcher)

    async def attach(
        self, namespace: str, pod: str, container: str, *, command: Command | None = None
    ) -> PodStream:
        await self._request("attach" if command is None else "exec")
        current = self.lookup(PODS, namespace, pod)
        names = [c["name"] for c in current["spec"]["containers"]]
        if container not in names:
            raise KubeInvalid(
                f"container {container} is not valid for pod {pod}: one of {names}", status=400
            )
        if self.kubelet is None:
            raise KubeInvalid(f"pod {pod}: no kubelet runs it (no node in this API)", status=400)
        return await self.kubelet.attach(current, container, command)

    # -- test controls

    def compact_history(self) -> None:
        """Forget every past event: later watches from older versions get 410 Gone."""
        self.hub.compact()

    def close_watches(self) -> None:
        """End every open watch (as an API server restart does)."""
        self.hub.close_all()

    def objects(self, resource: ResourceLike) -> builtins.list[KubeObject]:
        res = self._resource(resource)
        return [deep_copy(obj) for _, obj in self.of_kind(res)]

    def all_keys(self) -> builtins.list[Key]:
        return sorted(self._objects)

    async def close(self) -> None:
        self.close_watches()
        if self.kubelet is not None:
            await self.kubelet.stop()


def _version(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise KubeInvalid(f"resourceVersion {text!r} is not valid", status=400) from None
