"""The pods of every EnvPool from one watch, with expectations, so a reconcile pass reads memory
instead of listing the API server.

A cache lags behind the reconciler's own writes: a pod it just created may not be in the cache
on the next pass, and one it just deleted may still be. Without care that means duplicate
creates and double deletes (agent-sandbox calls the fix "expectations"). ``members`` counts
pods created but not yet seen as pending members (for ``EXPECT_S`` at most, in case the
watch never shows them) and leaves out pods deleted but still cached.
"""

from __future__ import annotations

import time

from envfarm.k8s.api import PODS, KubeApi, KubeObject
from envfarm.k8s.informer import Informer
from envfarm.k8s.objects import name_of
from envfarm.k8s.pools import POOL_LABEL

EXPECT_S = 30.0

PoolKey = tuple[str, str]
"""(namespace, pool name)."""


class PoolPods:
    def __init__(self, api: KubeApi, namespace: str | None) -> None:
        self.informer = Informer(api, PODS, namespace, label_selector=POOL_LABEL)
        self._creating: dict[PoolKey, dict[str, float]] = {}
        self._deleting: dict[PoolKey, set[str]] = {}

    def members(self, namespace: str, pool: str) -> tuple[list[KubeObject], int]:
        """The pool's cached pods (less those being deleted) and how many are pending."""
        key = (namespace, pool)
        pods = [
            pod
            for (ns, _), pod in self.informer.cache.items()
            if ns == namespace and (pod["metadata"].get("labels") or {}).get(POOL_LABEL) == pool
        ]
        names = {name_of(pod) for pod in pods}
        now = time.monotonic()
        creating = {
            name: at
            for name, at in self._creating.get(key, {}).items()
            if name not in names and now - at < EXPECT_S
        }
        self._creating[key] = creating
        deleting = self._deleting.get(key, set()) & names
        self._deleting[key] = deleting
        return [pod for pod in pods if name_of(pod) not in deleting], len(creating)

    def created(self, namespace: str, pool: str, name: str) -> None:
        self._creating.setdefault((namespace, pool), {})[name] = time.monotonic()

    def deleted(self, namespace: str, pool: str, name: str) -> None:
        self._deleting.setdefault((namespace, pool), set()).add(name)
