"""The EnvPool reconciler: keep ``spec.replicas`` warm, unclaimed environment pods of a task.

Level-based, as Kubernetes controllers are: each pass reads the pool and its pods (label
``envfarm.dev/pool=<name>``), then creates what is missing, deletes the surplus (stale first,
then not ready, newest first), deletes pods that ended, and writes ``status`` (``replicas``,
``readyReplicas``, ``selector`` for the scale subresource, ``observedGeneration`` and the
``Ready`` condition). Pods are owned by the pool (owner reference), so deleting the pool
removes them without a finalizer. The pod template comes from a ``TemplateSource`` (the
operator renders it from the pool's task); its hash labels each pod, and with
``updateStrategy.type: Recreate`` pods of an older template are replaced at once (with
``OnReplenish``, only as they are claimed or deleted).
Claims are in ``envfarm.k8s.pools``, below both the operator and the Kubernetes backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from envfarm.errors import KubeNotFound
from envfarm.k8s.api import ENV_POOLS, PODS, KubeApi, KubeObject
from envfarm.k8s.objects import name_of, owner_reference
from envfarm.k8s.pools import POOL_LABEL, pod_ready, pool_selector
from envfarm.operator.conditions import set_condition
from envfarm.operator.poolcache import PoolPods

TEMPLATE_HASH = "envfarm.dev/template-hash"
CREATE_BATCH = 50

TemplateSource = Callable[[KubeObject], Awaitable[KubeObject]]
"""EnvPool -> pod template (``metadata`` with labels and annotations, ``spec``)."""


def template_hash(template: KubeObject) -> str:
    text = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _ended(pod: KubeObject) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _surplus_first(pods: list[KubeObject], fresh: str) -> list[KubeObject]:
    """Stale pods first, then not ready ones, newest first within each."""
    newest = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True)
    return sorted(
        newest,
        key=lambda p: (
            (p["metadata"].get("labels") or {}).get(TEMPLATE_HASH) == fresh,
            pod_ready(p),
        ),
    )


class EnvPoolReconciler:
    """``pods``: read pool members from a watch-fed cache (``poolcache``) instead of a list."""

    def __init__(
        self, api: KubeApi, templates: TemplateSource, pods: PoolPods | None = None
    ) -> None:
        self.api = api
        self.templates = templates
        self.pods = pods

    def new_pod(self, pool: KubeObject, template: KubeObject, digest: str) -> KubeObject:
        metadata = dict(template.get("metadata") or {})
        labels = {
            **(metadata.get("labels") or {}),
            POOL_LABEL: name_of(pool),
            TEMPLATE_HASH: digest,
        }
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{name_of(pool)[:50]}-",
                "labels": labels,
                "annotations": dict(metadata.get("annotations") or {}),
                "ownerReferences": [owner_reference(pool)],
            },
            "spec": template["spec"],
        }

    async def reconcile(self, namespace: str, name: str) -> None:
        try:
            pool = await self.api.get(ENV_POOLS, namespace, name)
        except KubeNotFound:
            return  # deleted: its pods go with it (owner references)
        if pool["metadata"].get("deletionTimestamp"):
            return
        template = await self.templates(pool)
        digest = template_hash(template)
        spec = pool.get("spec") or {}
        desired = int(spec.get("replicas", 1))
        recreate = (spec.get("updateStrategy") or {}).get("type") == "Recreate"
        if self.pods is not None:
            members, pending = self.pods.members(namespace, name)
        else:
            listing = await self.api.list(PODS, namespace, label_selector=pool_selector(name))
            members, pending = listing.items, 0
        pods = [p for p in members if not p["metadata"].get("deletionTimestamp")]
        doomed = [p for p in pods if _ended(p)]
        live = [p for p in pods if not _ended(p)]
        if recreate:
            doomed += [p for p in live if p["metadata"]["labels"].get(TEMPLATE_HASH) != digest]
            live = [p for p in live if p["metadata"]["labels"].get(TEMPLATE_HASH) == digest]
        if len(live) > desired:
            live = _surplus_first(live, digest)
            doomed += live[: len(live) - desired]
            live = live[len(live) - desired :]
        await self._delete(namespace, name, doomed)
        missing = max(desired - len(live) - pending, 0)
        created = await self._create(namespace, pool, template, digest, missing)
        ready = sum(1 for p in live if pod_ready(p))
        status = {
            "replicas": len(live) + pending + created,
            "readyReplicas": ready,
            "selector": pool_selector(name),
            "observedGeneration": pool["metadata"].get("generation", 1),
        }
        await self._write_status(pool, status, desired)

    async def _delete(self, namespace: str, pool: str, pods: list[KubeObject]) -> None:
        async def delete(pod: KubeObject) -> None:
            with contextlib.suppress(KubeNotFound):
                await self.api.delete(PODS, namespace, name_of(pod))
            if self.pods is not None:
                self.pods.deleted(namespace, pool, name_of(pod))

        await asyncio.gather(*(delete(p) for p in pods))

    async def _create(
        self, namespace: str, pool: KubeObject, template: KubeObject, digest: str, count: int
    ) -> int:
        """Create up to ``CREATE_BATCH`` pods now (the next pass creates the rest)."""
        batch = min(count, CREATE_BATCH)
        body = self.new_pod(pool, template, digest)
        made = await asyncio.gather(*(self.api.create(PODS, namespace, body) for _ in range(batch)))
        if self.pods is not None:
            for pod in made:
                self.pods.created(namespace, name_of(pool), name_of(pod))
        return batch

    async def _write_status(self, pool: KubeObject, status: dict[str, Any], desired: int) -> None:
        ready = status["readyReplicas"] >= desired
        reason = "WarmEnvironmentsReady" if ready else "WarmingUp"
        message = f"{status['readyReplicas']} of {desired} environments ready"
        await set_condition(
            self.api, ENV_POOLS, pool, "Ready", ready, reason, message, extra_status=status
        )
