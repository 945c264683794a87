"""What the in-memory API server validates, and its ``scale`` subresource (pure functions)."""

from __future__ import annotations

from typing import Any

from envfarm.errors import KubeInvalid, KubeNotFound
from envfarm.k8s.api import PODS, KubeObject, Resource
from envfarm.k8s.objects import deep_copy, get_path, label_problem, meta, name_problem, set_path

_POD_MUTABLE = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds")


def spec_part(obj: KubeObject) -> dict[str, Any]:
    """Everything but metadata and status: what ``generation`` counts changes of."""
    skipped = ("metadata", "status", "apiVersion", "kind")
    return {key: value for key, value in obj.items() if key not in skipped}


def without_version(obj: KubeObject) -> KubeObject:
    copy = dict(obj)
    copy["metadata"] = {k: v for k, v in obj.get("metadata", {}).items() if k != "resourceVersion"}
    return copy


def check_namespace(metadata: dict[str, Any], namespace: str) -> None:
    given = metadata.get("namespace")
    if given and given != namespace:
        raise KubeInvalid(
            f"the namespace of the object ({given}) does not match the namespace on the "
            f"request ({namespace})",
            status=400,
        )
    metadata["namespace"] = namespace


def check_object(res: Resource, name: str, obj: KubeObject) -> None:
    problems = [name_problem(name)]
    problems += [label_problem(k, v) for k, v in (meta(obj).get("labels") or {}).items()]
    for ref in meta(obj).get("ownerReferences") or []:
        if not all(ref.get(f) for f in ("apiVersion", "kind", "name", "uid")):
            problems.append(f"ownerReferences: {ref} needs apiVersion, kind, name and uid")
    if res == PODS and not (obj.get("spec") or {}).get("containers"):
        problems.append("spec.containers: Required value")
    found = [p for p in problems if p]
    if found:
        raise KubeInvalid(f'{res.kind} "{name}" is invalid: {"; ".join(found)}', status=422)


def check_pod_update(current: KubeObject, new: KubeObject) -> None:
    old_spec, new_spec = dict(current.get("spec") or {}), dict(new.get("spec") or {})
    for field in _POD_MUTABLE:
        old_spec.pop(field, None)
        new_spec.pop(field, None)
    for spec in (old_spec, new_spec):
        spec["containers"] = [
            {k: v for k, v in c.items() if k != "image"} for c in spec.get("containers", [])
        ]
    if old_spec != new_spec:
        raise KubeInvalid(
            "pod updates may not change fields other than spec.containers[*].image, "
            "spec.activeDeadlineSeconds, spec.tolerations and "
            "spec.terminationGracePeriodSeconds",
            status=422,
        )


def scale_of(res: Resource, obj: KubeObject) -> KubeObject:
    """The ``autoscaling/v1`` Scale of ``obj``."""
    if res.scale is None:
        raise KubeNotFound(f"{res.key} has no scale subresource", status=404)
    metadata = obj["metadata"]
    status: dict[str, Any] = {"replicas": get_path(obj, res.scale.status_replicas_path) or 0}
    if res.scale.label_selector_path and (s := get_path(obj, res.scale.label_selector_path)):
        status["selector"] = s
    kept = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {key: metadata[key] for key in kept},
        "spec": {"replicas": get_path(obj, res.scale.spec_replicas_path) or 0},
        "status": status,
    }


def scaled(res: Resource, current: KubeObject, scale: KubeObject) -> KubeObject:
    """``current`` with the replicas of ``scale`` (generation bumped when they change)."""
    assert res.scale is not None
    replicas = get_path(scale, ".spec.replicas")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise KubeInvalid(
            f"spec.replicas: must be a non-negative integer: {replicas!r}", status=422
        )
    new = deep_copy(current)
    set_path(new, res.scale.spec_replicas_path, replicas)
    if spec_part(new) != spec_part(current):
        meta(new)["generation"] = int(current["metadata"].get("generation", 1)) + 1
    return new
