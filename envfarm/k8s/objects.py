"""Pure helpers over Kubernetes objects as JSON dicts: metadata access, JSON merge patches,
dotted paths, owner references and the name and label syntax the API server enforces."""

from __future__ import annotations

import copy
import re
from datetime import UTC, datetime
from typing import Any

from envfarm.k8s.api import KubeObject

_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def meta(obj: KubeObject) -> dict[str, Any]:
    found = obj.setdefault("metadata", {})
    assert isinstance(found, dict)
    return found


def name_of(obj: KubeObject) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def labels_of(obj: KubeObject) -> dict[str, str]:
    return dict(obj.get("metadata", {}).get("labels") or {})


def uid_of(obj: KubeObject) -> str:
    return str(obj.get("metadata", {}).get("uid", ""))


def resource_version(obj: KubeObject) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion", ""))


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def deep_copy(obj: KubeObject) -> KubeObject:
    return copy.deepcopy(obj)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, ``null`` removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def get_path(obj: KubeObject, path: str) -> Any:
    """The value at ``.spec.replicas``-style ``path``, or None."""
    node: Any = obj
    for part in path.strip(".").split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def set_path(obj: KubeObject, path: str, value: Any) -> None:
    parts = path.strip(".").split(".")
    node = obj
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def owner_reference(owner: KubeObject, *, controller: bool = True) -> dict[str, Any]:
    """An ownerReference to ``owner`` (blocking its foreground deletion)."""
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": name_of(owner),
        "uid": uid_of(owner),
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def owner_uids(obj: KubeObject) -> list[str]:
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return [str(ref.get("uid", "")) for ref in refs]


def name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid object name (a DNS-1123 subdomain), or None."""
    if not name:
        return "a name is required (metadata.name or metadata.generateName)"
    if len(name) > 253 or not _NAME.fullmatch(name):
        return (
            f"{name!r} is not a valid name: lowercase letters, digits, '-' and '.', starting "
            "and ending with a letter or digit, at most 253 characters"
        )
    return None


def label_problem(key: str, value: str) -> str | None:
    """Why ``key: value`` is not a valid label, or None."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _NAME.fullmatch(prefix)):
        return f"label key {key!r}: its prefix must be a DNS subdomain"
    if not name or len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        return f"label key {key!r}: the name part must be 1-63 alphanumerics, '-', '_' or '.'"
    if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        return f"label {key}={value!r}: values are at most 63 alphanumerics, '-', '_' or '.'"
    return None
