"""The synchronous core of the in-memory API: objects, versions, updates and deletion.

Every write goes through ``write`` (next resourceVersion, watch event, owner index, kubelet)
or ``remove``. Stored objects are never mutated in place: an update stores a new dict, so an
event can keep the object it reports without copying it.
"""

from __future__ import annotations

import collections
import random
import uuid
from typing import TYPE_CHECKING

from envfarm.errors import KubeConflict, KubeInvalid, KubeNotFound
from envfarm.k8s.api import PODS, EventType, KubeObject, Propagation, Resource, Subresource
from envfarm.k8s.objects import deep_copy, meta, now_rfc3339, resource_version
from envfarm.testing.k8s.memory_gc import OwnerIndex
from envfarm.testing.k8s.memory_rules import (
    check_namespace,
    check_object,
    check_pod_update,
    scaled,
    spec_part,
    without_version,
)
from envfarm.testing.k8s.memory_watch import StoredEvent, WatchHub

if TYPE_CHECKING:
    from envfarm.testing.k8s.kubelet import SimulatedKubelet

Key = tuple[str, str, str]
"""(resource key, namespace, name)."""
_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"
_SYSTEM_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds")


class ObjectStore:
    def __init__(self, *, history: int, watch_buffer: int) -> None:
        self._by_key: dict[str, Resource] = {}
        self._objects: dict[Key, KubeObject] = {}
        self._kinds: dict[str, dict[tuple[str, str], KubeObject]] = {}
        """Resource key -> (namespace, name) -> object: lists scan one type, not the store."""
        self._rv = 1
        self.hub = WatchHub(history=history, buffer=watch_buffer)
        self.owners = OwnerIndex(self)
        self.kubelet: SimulatedKubelet | None = None
        self.calls: collections.Counter[str] = collections.Counter()
        """Requests served, by verb (to budget API QPS)."""

    def resource_by_key(self, key: str) -> Resource:
        return self._by_key[key]

    def lookup(self, res: Resource, namespace: str, name: str) -> KubeObject:
        found = self._objects.get((res.key, namespace, name))
        if found is None:
            raise KubeNotFound(
                f'{res.key} "{name}" not found in namespace {namespace}',
                status=404,
                reason="NotFound",
            )
        return found

    def find(self, key: Key) -> KubeObject | None:
        return self._objects.get(key)

    def of_kind(self, res: Resource) -> list[tuple[tuple[str, str], KubeObject]]:
        """((namespace, name), object) of one resource type, in key order (as the server)."""
        return sorted(self._kinds.get(res.key, {}).items())

    def create_now(self, res: Resource, namespace: str, body: KubeObject) -> KubeObject:
        obj = deep_copy(body)
        metadata = meta(obj)
        check_namespace(metadata, namespace)
        if metadata.get("resourceVersion"):
            raise KubeInvalid(
                "metadata.resourceVersion must not be set on objects to be created", status=422
            )
        name = metadata.get("name") or ""
        if not name and metadata.get("generateName"):
            name = metadata["generateName"] + "".join(random.choices(_SUFFIX, k=5))
        check_object(res, name, obj)
        if (res.key, namespace, name) in self._objects:
            raise KubeConflict(
                f'{res.key} "{name}" already exists', status=409, reason="AlreadyExists"
            )
        for field in _SYSTEM_META:
            metadata.pop(field, None)
        metadata.update(
            name=name,
            namespace=namespace,
            uid=str(uuid.uuid4()),
            creationTimestamp=now_rfc3339(),
            generation=1,
        )
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        if res.status_subresource:
            obj["status"] = {"phase": "Pending"} if res == PODS else {}
        self.write(res, obj, None)
        self.owners.after_write(res, obj)
        return obj

    def replace_now(
        self,
        res: Resource,
        namespace: str,
        name: str,
        body: KubeObject,
        subresource: Subresource | None,
    ) -> KubeObject:
        current = self.lookup(res, namespace, name)
        metadata = meta(body)
        if metadata.get("name", name) != name:
            raise KubeInvalid(
                f"the name in the body ({metadata.get('name')!r}) does not match {name!r}",
                status=400,
            )
        check_namespace(metadata, namespace)
        wanted = metadata.get("resourceVersion")
        if wanted and wanted != resource_version(current):
            raise KubeConflict(
                f'Operation cannot be fulfilled on {res.key} "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
                status=409,
                reason="Conflict",
            )
        if subresource == "scale":
            new = scaled(res, current, body)
        elif subresource == "status":
            new = deep_copy(current)
            new["status"] = body.get("status") or {}
        else:
            new = self._updated(res, current, body)
        return self.commit_update(res, current, new)

    def _updated(self, res: Resource, current: KubeObject, body: KubeObject) -> KubeObject:
        new = body
        metadata, old_meta = meta(new), current["metadata"]
        for field in (*_SYSTEM_META, "generation", "namespace", "name"):
            if field in old_meta:
                metadata[field] = old_meta[field]
            else:
                metadata.pop(field, None)
        new["apiVersion"], new["kind"] = res.api_version, res.kind
        if res.status_subresource:
            new["status"] = deep_copy(current.get("status") or {})
        check_object(res, metadata["name"], new)
        if old_meta.get("deletionTimestamp"):
            added = set(metadata.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                raise KubeInvalid(
                    f"no new finalizers can be added if the object is being deleted: {added}",
                    status=422,
                )
        if res == PODS:
            check_pod_update(current, new)
        if spec_part(new) != spec_part(current):
            metadata["generation"] = int(old_meta.get("generation", 1)) + 1
        return new

    def commit_update(self, res: Resource, current: KubeObject, new: KubeObject) -> KubeObject:
        """Store ``new`` in place of ``current``; delete it instead when the update removed
        the last finalizer of an object being deleted. A no-op is not written."""
        new_meta = meta(new)
        dropped_last = current["metadata"].get("finalizers") and not new_meta.get("finalizers")
        if new_meta.get("deletionTimestamp") and dropped_last:
            self.remove(res, current)
            return new
        if without_version(new) == without_version(current):
            return current
        self.write(res, new, current)
        self.owners.after_write(res, new)
        return new

    def delete_internal(
        self,
        res: Resource,
        current: KubeObject,
        propagation: Propagation,
        grace_period_seconds: int | None = None,
    ) -> KubeObject:
        """A pod the kubelet runs is stopped first (graceful deletion), unless grace is 0."""
        if self.kubelet is not None and res == PODS and grace_period_seconds != 0:
            marked = self.kubelet.graceful_delete(current, grace_period_seconds)
            if marked is not None:
                return marked
        return self.delete_now(res, current, propagation)

    def delete_now(
        self, res: Resource, current: KubeObject, propagation: Propagation
    ) -> KubeObject:
        if propagation == "Orphan":
            self.owners.orphan(current)
        finalizers = list(current["metadata"].get("finalizers") or [])
        foreground = propagation == "Foreground" and self.owners.has_dependents(current)
        if foreground and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        if not finalizers:
            self.remove(res, current)
            return current
        new = deep_copy(current)
        meta(new)["finalizers"] = finalizers
        meta(new).setdefault("deletionTimestamp", now_rfc3339())
        meta(new).setdefault("deletionGracePeriodSeconds", 0)
        self.write(res, new, current)
        if foreground:
            self.owners.delete_dependents(new)
        return new

    def write(self, res: Resource, obj: KubeObject, old: KubeObject | None) -> None:
        self._rv += 1
        metadata = obj["metadata"]
        metadata["resourceVersion"] = str(self._rv)
        self._objects[(res.key, metadata["namespace"], metadata["name"])] = obj
        self._kinds.setdefault(res.key, {})[(metadata["namespace"], metadata["name"])] = obj
        kind: EventType = "ADDED" if old is None else "MODIFIED"
        self.hub.emit(StoredEvent(self._rv, kind, res.key, metadata["namespace"], obj, old))
        if self.kubelet is not None and res == PODS:
            self.kubelet.observe(obj)

    def remove(self, res: Resource, current: KubeObject) -> None:
        metadata = current["metadata"]
        key = (res.key, metadata["namespace"], metadata["name"])
        if self._objects.get(key) is None:
            return
        del self._objects[key]
        del self._kinds[res.key][(metadata["namespace"], metadata["name"])]
        self._rv += 1
        last = deep_copy(current)
        last["metadata"]["resourceVersion"] = str(self._rv)
        self.hub.emit(StoredEvent(self._rv, "DELETED", res.key, metadata["namespace"], last))
        if self.kubelet is not None and res == PODS:
            self.kubelet.forget(last)
        self.owners.after_remove(res, current)
