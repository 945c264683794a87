"""Claiming a warm environment pod out of an EnvPool (used by the Kubernetes sandbox backend).

A claim takes one ready pod out of the pool with a single merge patch carrying the pod's
``resourceVersion``: the pool label and the pool's owner reference go, ``envfarm.dev/claimed-by``
and the claimer's owner (if any) come. Two claimers racing for one pod: one wins, the other
gets 409 and tries another pod. The pod no longer matches the pool's selector, so the next
pass replaces it. ``PoolClaimer`` keeps the pool's pods in a watch-fed cache, so a claim costs
one API request.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from envfarm.errors import KubeConflict, KubeNotFound
from envfarm.k8s.api import PODS, KubeApi, KubeObject
from envfarm.k8s.informer import Informer
from envfarm.k8s.objects import name_of, resource_version

POOL_LABEL = "envfarm.dev/pool"
CLAIMED_LABEL = "envfarm.dev/claimed-by"


def pool_selector(pool_name: str) -> str:
    return f"{POOL_LABEL}={pool_name}"


def pod_ready(pod: KubeObject) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


class NoWarmEnvironment(KubeConflict):
    """The pool has no ready, unclaimed environment right now (retry, or start one cold)."""


def claim_patch(
    pod: KubeObject,
    claimer: str,
    owners: list[dict[str, Any]] | None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> KubeObject:
    """The claim: out of the pool, to ``claimer`` (and ``owners``), with extra ``labels`` and
    ``annotations``."""
    metadata: dict[str, Any] = {
        "resourceVersion": resource_version(pod),
        "labels": {**(labels or {}), POOL_LABEL: None, CLAIMED_LABEL: claimer},
        "ownerReferences": owners or None,
    }
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata}


async def claim(
    api: KubeApi,
    namespace: str,
    pool: str,
    claimer: str,
    *,
    owner: dict[str, Any] | None = None,
    candidates: list[KubeObject] | None = None,
) -> KubeObject:
    """Take a ready pod out of ``pool`` for ``claimer``; ``NoWarmEnvironment`` when none is."""
    if candidates is None:
        listing = await api.list(PODS, namespace, label_selector=pool_selector(pool))
        candidates = listing.items
    ready = [p for p in candidates if pod_ready(p)]
    random.shuffle(ready)
    for pod in ready:
        try:
            owners = [owner] if owner is not None else None
            return await api.patch(PODS, namespace, name_of(pod), claim_patch(pod, claimer, owners))
        except (KubeConflict, KubeNotFound):
            continue  # another claimer took it, or it changed: try the next one
    raise NoWarmEnvironment(
        f"pool {pool} has no ready environment to claim", status=409, reason="NoWarmEnvironment"
    )


class PoolClaimer:
    """Claims from a pool through a watch-fed cache of its pods (one request per claim).

    Pods being claimed by this claimer are set aside, so its concurrent claims never race each
    other; a 409 only comes from another claimer (another process) taking the same pod."""

    def __init__(self, api: KubeApi, namespace: str, pool: str) -> None:
        self.api, self.namespace, self.pool = api, namespace, pool
        self.informer = Informer(api, PODS, namespace, label_selector=pool_selector(pool))
        self.conflicts = 0
        self._taken: set[str] = set()

    async def start(self) -> None:
        self.informer.start()
        await self.informer.synced.wait()

    def _candidates(
        self, skipped: set[str], accept: Callable[[KubeObject], bool]
    ) -> list[KubeObject]:
        return [
            pod
            for pod in self.informer.cache.values()
            if pod_ready(pod)
            and name_of(pod) not in self._taken
            and name_of(pod) not in skipped
            and accept(pod)
        ]

    async def claim(
        self,
        claimer: str,
        *,
        owners: list[dict[str, Any]] | None = None,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        accept: Callable[[KubeObject], bool] = lambda pod: True,
    ) -> KubeObject:
        """A ready pod of the pool that ``accept`` takes, claimed; NoWarmEnvironment if none."""
        skipped: set[str] = set()
        while ready := self._candidates(skipped, accept):
            pod = random.choice(ready)
            name = name_of(pod)
            self._taken.add(name)
            try:
                claimed = await self.api.patch(
                    PODS,
                    self.namespace,
                    name,
                    claim_patch(pod, claimer, owners, labels, annotations),
                )
            except (KubeConflict, KubeNotFound):
                self.conflicts += 1
                skipped.add(name)
                continue
            finally:
                self._taken.discard(name)
            self.informer.cache.pop((self.namespace, name), None)
            return claimed
        raise NoWarmEnvironment(
            f"pool {self.pool} has no ready environment to claim",
            status=409,
            reason="NoWarmEnvironment",
        )

    async def close(self) -> None:
        await self.informer.stop()
