"""kustomize's built-in transformers (namespace, labels, replicas, images) and its output order.

Each follows kustomize v5's behaviour, including its surprises: the namespace transformer
renames ``Namespace`` objects and rebinds ``ServiceAccount`` subjects named ``default``; the
image transformer rewrites every ``containers``/``initContainers`` list it finds, inside custom
resources too.
"""

from __future__ import annotations

from typing import Any

CLUSTER_SCOPED = frozenset(
    {
        "APIService",
        "CSIDriver",
        "CSINode",
        "CertificateSigningRequest",
        "ClusterRole",
        "ClusterRoleBinding",
        "ComponentStatus",
        "CustomResourceDefinition",
        "FlowSchema",
        "IngressClass",
        "MutatingWebhookConfiguration",
        "Namespace",
        "Node",
        "PersistentVolume",
        "PriorityClass",
        "PriorityLevelConfiguration",
        "RuntimeClass",
        "StorageClass",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
        "VolumeAttachment",
    }
)

ORDER_FIRST = (
    "Namespace",
    "ResourceQuota",
    "StorageClass",
    "CustomResourceDefinition",
    "ServiceAccount",
    "PodSecurityPolicy",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "ConfigMap",
    "Secret",
    "Endpoints",
    "Service",
    "LimitRange",
    "PriorityClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Deployment",
    "StatefulSet",
    "CronJob",
    "PodDisruptionBudget",
)
ORDER_LAST = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")

POD_TEMPLATE_KINDS = {
    "Deployment": ("apps",),
    "ReplicaSet": ("apps",),
    "DaemonSet": ("apps",),
    "StatefulSet": ("apps",),
    "ReplicationController": ("",),
    "Job": ("batch",),
}
REPLICATED_KINDS = frozenset({"Deployment", "ReplicaSet", "ReplicationController", "StatefulSet"})

Resource = dict[str, Any]


def _group(resource: Resource) -> str:
    api_version: str = resource["apiVersion"]
    return api_version.split("/")[0] if "/" in api_version else ""


def _mapping(parent: dict[str, Any], *path: str) -> dict[str, Any]:
    node = parent
    for key in path:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    return node


def apply_namespace(resources: list[Resource], namespace: str) -> None:
    for resource in resources:
        kind = resource["kind"]
        if kind == "Namespace":
            resource["metadata"]["name"] = namespace
        elif kind not in CLUSTER_SCOPED:
            resource["metadata"]["namespace"] = namespace
        if kind in ("RoleBinding", "ClusterRoleBinding"):
            for subject in resource.get("subjects") or []:
                if subject.get("kind") == "ServiceAccount" and subject.get("name") == "default":
                    subject["namespace"] = namespace


def apply_labels(resources: list[Resource], pairs: dict[str, str], *, templates: bool) -> None:
    for resource in resources:
        _mapping(resource, "metadata", "labels").update(pairs)
        if not templates:
            continue
        kind, group = resource["kind"], _group(resource)
        if group in POD_TEMPLATE_KINDS.get(kind, ()):
            _mapping(resource, "spec", "template", "metadata", "labels").update(pairs)
        if kind == "StatefulSet" and group == "apps":
            for claim in resource["spec"].get("volumeClaimTemplates") or []:
                _mapping(claim, "metadata", "labels").update(pairs)
        elif kind == "CronJob" and group == "batch":
            job = _mapping(resource, "spec", "jobTemplate")
            _mapping(job, "metadata", "labels").update(pairs)
            _mapping(job, "spec", "template", "metadata", "labels").update(pairs)


def apply_replicas(resources: list[Resource], name: str, count: int) -> bool:
    found = False
    for resource in resources:
        if resource["kind"] in REPLICATED_KINDS and resource["metadata"]["name"] == name:
            _mapping(resource, "spec")["replicas"] = count
            found = True
    return found


def split_image(reference: str) -> tuple[str, str, str]:
    """``name[:tag][@digest]`` -> (name, tag, digest); a registry port is not a tag."""
    name, _, digest = reference.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = ""
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
    return name, tag, digest


def _new_reference(
    reference: str, new_name: str | None, new_tag: str | None, digest: str | None
) -> str:
    name, tag, old_digest = split_image(reference)
    name = new_name or name
    if new_tag is not None and digest is not None:
        return f"{name}:{new_tag}@{digest}"
    if digest is not None:
        return f"{name}@{digest}"
    if new_tag is not None:
        return f"{name}:{new_tag}"
    suffix = f":{tag}" if tag else ""
    return f"{name}{suffix}@{old_digest}" if old_digest else f"{name}{suffix}"


def _walk_containers(node: Any, visit: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                for container in value:
                    if isinstance(container, dict) and isinstance(container.get("image"), str):
                        visit(container)
            _walk_containers(value, visit)
    elif isinstance(node, list):
        for item in node:
            _walk_containers(item, visit)


def apply_images(
    resources: list[Resource],
    name: str,
    new_name: str | None,
    new_tag: str | None,
    digest: str | None,
) -> None:
    def visit(container: dict[str, Any]) -> None:
        if split_image(container["image"])[0] == name:
            container["image"] = _new_reference(container["image"], new_name, new_tag, digest)

    for resource in resources:
        _walk_containers(resource, visit)


def _kind_order(kind: str) -> int:
    if kind in ORDER_FIRST:
        return ORDER_FIRST.index(kind) - len(ORDER_FIRST)
    if kind in ORDER_LAST:
        return ORDER_LAST.index(kind) + 1
    return 0


def legacy_sort_key(resource: Resource) -> tuple[int, str, str]:
    """kustomize's legacy order: kind rank, then group_version_kind, then namespace|name."""
    api_version: str = resource["apiVersion"]
    version = api_version.rsplit("/", 1)[-1]
    gvk = f"{_group(resource) or '~G'}_{version}_{resource['kind']}"
    metadata = resource["metadata"]
    return (
        _kind_order(resource["kind"]),
        gvk,
        f"{metadata.get('namespace') or '~X'}|{metadata['name']}",
    )
