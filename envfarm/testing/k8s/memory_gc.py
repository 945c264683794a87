"""Owner references and garbage collection of the in-memory API, as Kubernetes' collector does.

An object whose owners are all gone is deleted (background propagation); a namespaced owner in
another namespace counts as gone, as cross-namespace references do in Kubernetes. An owner
deleted in the foreground carries the ``foregroundDeletion`` finalizer until its dependents are
gone: its dependents are deleted first, and when the last one disappears the finalizer is
removed and the owner with it. A dependent with an owner still alive is kept and loses its
references to owners that are gone or going. Orphan propagation strips the references before
the owner goes. The collector runs synchronously inside the request that triggers it, after
that request's own change, so watches see the owner's event before its dependents'.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from envfarm.k8s.api import KubeObject, Resource
from envfarm.k8s.objects import deep_copy, meta, owner_uids, uid_of

if TYPE_CHECKING:
    from envfarm.testing.k8s.memory_store import Key, ObjectStore

FOREGROUND = "foregroundDeletion"


def _key(res_key: str, obj: KubeObject) -> Key:
    metadata = obj["metadata"]
    return (res_key, metadata["namespace"], metadata["name"])


def in_foreground_deletion(obj: KubeObject) -> bool:
    metadata = obj.get("metadata", {})
    return bool(metadata.get("deletionTimestamp")) and FOREGROUND in (
        metadata.get("finalizers") or []
    )


def _elsewhere(owner: KubeObject, dependent: KubeObject) -> bool:
    """A namespaced owner in another namespace than its dependent's: Kubernetes treats the
    reference as absent (and deletes a dependent without another owner)."""
    namespace = owner["metadata"].get("namespace")
    return bool(namespace) and namespace != dependent["metadata"].get("namespace")


class OwnerIndex:
    def __init__(self, api: ObjectStore) -> None:
        self.api = api
        self._dependents: dict[str, set[Key]] = defaultdict(set)
        self._owners_of: dict[Key, tuple[str, ...]] = {}
        self._uids: dict[str, Key] = {}

    def _by_uid(self, uid: str) -> KubeObject | None:
        key = self._uids.get(uid)
        return self.api.find(key) if key is not None else None

    def after_write(self, res: Resource, obj: KubeObject) -> None:
        key = _key(res.key, obj)
        self._uids[uid_of(obj)] = key
        owners = tuple(owner_uids(obj))
        for uid in self._owners_of.get(key, ()):
            if uid not in owners:
                self._dependents[uid].discard(key)
        for uid in owners:
            self._dependents[uid].add(key)
        self._owners_of[key] = owners
        if owners:
            self.reconsider(key)

    def after_remove(self, res: Resource, obj: KubeObject) -> None:
        key = _key(res.key, obj)
        self._uids.pop(uid_of(obj), None)
        for uid in self._owners_of.pop(key, ()):
            self._dependents[uid].discard(key)
            owner = self._by_uid(uid)
            if owner is not None and in_foreground_deletion(owner):
                self.finish_foreground(owner)
        for dependent in sorted(self._dependents.pop(uid_of(obj), set())):
            self.reconsider(dependent)

    def has_dependents(self, owner: KubeObject) -> bool:
        return bool(self._dependents.get(uid_of(owner)))

    def delete_dependents(self, owner: KubeObject) -> None:
        for dependent in sorted(self._dependents.get(uid_of(owner), set())):
            self.reconsider(dependent)
        current = self._by_uid(uid_of(owner))
        if current is not None:
            self.finish_foreground(current)

    def finish_foreground(self, owner: KubeObject) -> None:
        if self._dependents.get(uid_of(owner)):
            return
        new = deep_copy(owner)
        meta(new)["finalizers"] = [f for f in meta(new).get("finalizers", []) if f != FOREGROUND]
        res = self.api.resource_by_key(self._uids[uid_of(owner)][0])
        self.api.commit_update(res, owner, new)

    def orphan(self, owner: KubeObject) -> None:
        uid = uid_of(owner)
        for key in sorted(self._dependents.get(uid, set())):
            self._strip(key, {uid})

    def _strip(self, key: Key, uids: set[str]) -> None:
        current = self.api.find(key)
        if current is None:
            return
        new = deep_copy(current)
        refs = meta(new).get("ownerReferences") or []
        meta(new)["ownerReferences"] = [r for r in refs if r.get("uid") not in uids]
        if not meta(new)["ownerReferences"]:
            del meta(new)["ownerReferences"]
        self.api.commit_update(self.api.resource_by_key(key[0]), current, new)

    def reconsider(self, key: Key) -> None:
        """Delete ``key`` when no owner of it is alive; drop references to dead owners."""
        current = self.api.find(key)
        if current is None:
            return
        alive, going, gone = set(), set(), set()
        for uid in owner_uids(current):
            owner = self._by_uid(uid)
            if owner is None or _elsewhere(owner, current):
                gone.add(uid)
            elif in_foreground_deletion(owner):
                going.add(uid)
            else:
                alive.add(uid)
        if alive:
            if going or gone:
                self._strip(key, going | gone)
            return
        if current["metadata"].get("deletionTimestamp"):
            return
        res = self.api.resource_by_key(key[0])
        self.api.delete_internal(res, current, "Foreground" if going else "Background")
