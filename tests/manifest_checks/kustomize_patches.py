"""The two patch kinds kustomize applies: strategic merge and JSON 6902.

The strategic merge here knows the merge keys of the lists envfarm's manifests patch (pod
containers, their env, ports, volume mounts, the pod's volumes). Every other list is replaced
whole, which is also what kustomize does for lists without a merge key and for custom
resources. A merged list holds the patch's elements first, in the patch's order, then the
untouched elements of the original, as kustomize orders them. Patch directives (``$patch``,
``$setElementOrder``, ``$retainKeys``...) are refused with an error rather than half-applied.
"""

from __future__ import annotations

import copy
from typing import Any

from envfarm.errors import ManifestError

MERGE_KEYS: dict[str, tuple[str, ...]] = {
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "env": ("name",),
    "volumes": ("name",),
    "volumeMounts": ("mountPath",),
    "imagePullSecrets": ("name",),
    "ports": ("containerPort", "port"),
}


def strategic_merge(target: dict[str, Any], patch: dict[str, Any], where: str) -> None:
    """Merge ``patch`` into ``target`` in place: maps merge, ``null`` deletes a key."""
    for key, value in patch.items():
        if key.startswith("$"):
            raise ManifestError(f"{where}: patch directive {key!r} is not supported")
        current = target.get(key)
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(current, dict):
            strategic_merge(current, value, f"{where}.{key}")
        elif isinstance(value, list) and isinstance(current, list) and key in MERGE_KEYS:
            target[key] = _merge_list(current, value, MERGE_KEYS[key], f"{where}.{key}")
        else:
            target[key] = copy.deepcopy(value)


def _merge_key(items: list[Any], candidates: tuple[str, ...], where: str) -> str | None:
    for candidate in candidates:
        if items and all(isinstance(item, dict) and candidate in item for item in items):
            return candidate
    if all(isinstance(item, dict) for item in items):
        raise ManifestError(f"{where}: every element needs one of the keys {list(candidates)}")
    return None


def _merge_list(
    current: list[Any], patch: list[Any], candidates: tuple[str, ...], where: str
) -> list[Any]:
    key = _merge_key(patch, candidates, where)
    if key is None:
        return copy.deepcopy(patch)
    merged: list[Any] = []
    patched = {item[key] for item in patch}
    for item in patch:
        match = next((m for m in current if isinstance(m, dict) and m.get(key) == item[key]), None)
        element = copy.deepcopy(match) if match is not None else {}
        strategic_merge(element, item, f"{where}[{key}={item[key]}]")
        merged.append(element)
    rest = [m for m in current if not (isinstance(m, dict) and m.get(key) in patched)]
    return merged + copy.deepcopy(rest)


def _pointer(path: str, where: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ManifestError(f"{where}: path {path!r} must start with '/'")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _parent(document: Any, parts: list[str], where: str) -> tuple[Any, str]:
    node = document
    for part in parts[:-1]:
        node = _child(node, part, where)
    return node, parts[-1]


def _child(node: Any, part: str, where: str) -> Any:
    if isinstance(node, dict) and part in node:
        return node[part]
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    raise ManifestError(f"{where}: {part!r} does not exist")


def _get(document: Any, path: str, where: str) -> Any:
    node = document
    for part in _pointer(path, where):
        node = _child(node, part, where)
    return node


def _add(document: Any, path: str, value: Any, where: str) -> None:
    parts = _pointer(path, where)
    if not parts:
        raise ManifestError(f"{where}: cannot replace the whole object")
    parent, last = _parent(document, parts, where)
    if isinstance(parent, dict):
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list) and last == "-":
        parent.append(copy.deepcopy(value))
    elif isinstance(parent, list) and last.isdigit() and int(last) <= len(parent):
        parent.insert(int(last), copy.deepcopy(value))
    else:
        raise ManifestError(f"{where}: cannot add at {path!r}")


def _remove(document: Any, path: str, where: str) -> Any:
    parts = _pointer(path, where)
    if not parts:
        raise ManifestError(f"{where}: cannot remove the whole object")
    parent, last = _parent(document, parts, where)
    value = _child(parent, last, where)
    if isinstance(parent, dict):
        del parent[last]
    else:
        del parent[int(last)]
    return value


def json6902(document: dict[str, Any], operations: list[Any], where: str) -> None:
    """Apply RFC 6902 operations (add, remove, replace, move, copy, test) in place."""
    for index, operation in enumerate(operations):
        at = f"{where}[{index}]"
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise ManifestError(f"{at}: an operation needs 'op' and 'path'")
        op, path = operation["op"], operation["path"]
        if op in ("add", "replace", "test") and "value" not in operation:
            raise ManifestError(f"{at}: {op!r} needs a 'value'")
        if op in ("move", "copy") and "from" not in operation:
            raise ManifestError(f"{at}: {op!r} needs a 'from'")
        if op == "add":
            _add(document, path, operation["value"], at)
        elif op == "remove":
            _remove(document, path, at)
        elif op == "replace":
            _remove(document, path, at)
            _add(document, path, operation["value"], at)
        elif op == "move":
            _add(document, path, _remove(document, operation["from"], at), at)
        elif op == "copy":
            _add(document, path, _get(document, operation["from"], at), at)
        elif op == "test":
            if _get(document, path, at) != operation["value"]:
                raise ManifestError(f"{at}: test failed: {path} is not {operation['value']!r}")
        else:
            raise ManifestError(f"{at}: unknown op {op!r}")
