"""Status conditions as Kubernetes writes them: one entry per type, ``lastTransitionTime``
changed only when the status flips, written with one status merge patch (and not at all when
nothing changed, so a reconcile pass that finds everything in order writes nothing)."""

from __future__ import annotations

from typing import Any

from envfarm.k8s.api import KubeApi, KubeObject, ResourceLike
from envfarm.k8s.objects import name_of, now_rfc3339


def merged_conditions(
    current: list[dict[str, Any]],
    kind: str,
    status: bool,
    reason: str,
    message: str,
    generation: int | None,
) -> list[dict[str, Any]]:
    flag = "True" if status else "False"
    old = next((c for c in current if c.get("type") == kind), None)
    entry: dict[str, Any] = {
        "type": kind,
        "status": flag,
        "reason": reason,
        "message": message,
        "lastTransitionTime": (
            old["lastTransitionTime"]
            if old is not None and old.get("status") == flag and old.get("lastTransitionTime")
            else now_rfc3339()
        ),
    }
    if generation is not None:
        entry["observedGeneration"] = generation
    return [c for c in current if c.get("type") != kind] + [entry]


async def set_condition(
    api: KubeApi,
    resource: ResourceLike,
    obj: KubeObject,
    kind: str,
    status: bool,
    reason: str,
    message: str,
    *,
    extra_status: dict[str, Any] | None = None,
) -> None:
    """Set condition ``kind`` (and ``extra_status`` fields) on ``obj``'s status if changed."""
    current = dict(obj.get("status") or {})
    generation = obj.get("metadata", {}).get("generation")
    conditions = merged_conditions(
        list(current.get("conditions") or []), kind, status, reason, message, generation
    )
    wanted = {**current, **(extra_status or {}), "conditions": conditions}
    if wanted == current:
        return
    namespace = obj["metadata"]["namespace"]
    await api.patch(resource, namespace, name_of(obj), {"status": wanted}, subresource="status")
