"""A small kustomize: renders envfarm's manifests where no ``kubectl`` is installed.

It implements exactly the kustomization fields ``manifests/`` uses, with kustomize's own
semantics (checked against ``kubectl kustomize`` by the tests when kubectl is present):
``resources`` (files and kustomization directories), ``patches`` (strategic merge or JSON 6902,
from a file or inline, with an optional ``target``), ``namespace``, ``labels``, ``replicas``
and ``images``, applied in that order, the order kustomize applies its built-in transformers.
The output is sorted the way kustomize's default (legacy) order sorts it: namespaces, CRDs,
RBAC and configuration before the workloads that need them. Any other kustomization field is an
error naming the file and the field, never silently ignored.
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envfarm.errors import ManifestError
from tests.manifest_checks.kustomize_patches import json6902, strategic_merge
from tests.manifest_checks.kustomize_transforms import (
    apply_images,
    apply_labels,
    apply_namespace,
    apply_replicas,
    legacy_sort_key,
)

Resource = dict[str, Any]
KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Target(_Strict):
    group: str | None = None
    version: str | None = None
    kind: str | None = None
    name: str | None = None
    namespace: str | None = None


class Patch(_Strict):
    path: str | None = None
    patch: str | None = None
    target: Target | None = None


class LabelSet(_Strict):
    pairs: dict[str, str]
    include_selectors: bool = Field(default=False, alias="includeSelectors")
    include_templates: bool = Field(default=False, alias="includeTemplates")


class Replica(_Strict):
    name: str
    count: int = Field(ge=0)


class Image(_Strict):
    name: str
    new_name: str | None = Field(default=None, alias="newName")
    new_tag: str | None = Field(default=None, alias="newTag")
    digest: str | None = None


class Kustomization(_Strict):
    api_version: str = Field(default="kustomize.config.k8s.io/v1beta1", alias="apiVersion")
    kind: str = "Kustomization"
    resources: list[str] = Field(default_factory=list)
    patches: list[Patch] = Field(default_factory=list)
    namespace: str | None = None
    labels: list[LabelSet] = Field(default_factory=list)
    replicas: list[Replica] = Field(default_factory=list)
    images: list[Image] = Field(default_factory=list)


def render(directory: Path) -> list[Resource]:
    """The objects ``kubectl kustomize DIRECTORY`` prints, in the same order."""
    resources = _build(directory.resolve(), ())
    for resource in resources:
        if resource["metadata"].get("annotations") == {}:
            del resource["metadata"]["annotations"]  # kustomize drops it too
    return sorted(resources, key=legacy_sort_key)


def render_yaml(directory: Path) -> str:
    """The rendering as one multi-document YAML stream, ready for ``kubectl apply -f -``."""
    return yaml.safe_dump_all(render(directory), sort_keys=True)


def kustomization_file(directory: Path) -> Path:
    for name in KUSTOMIZATION_FILES:
        if (directory / name).is_file():
            return directory / name
    raise ManifestError(f"{directory}: no kustomization.yaml in this directory")


def load_kustomization(path: Path) -> Kustomization:
    data = _load_yaml(path)
    if len(data) != 1 or not isinstance(data[0], dict):
        raise ManifestError(f"{path}: expected one YAML mapping")
    try:
        kustomization = Kustomization.model_validate(data[0])
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or '(top)'}: {error['msg']}"
            for error in exc.errors()
        )
        raise ManifestError(f"{path}: {problems} (supported fields: {_fields()})") from exc
    if kustomization.kind != "Kustomization":
        raise ManifestError(f"{path}: kind must be Kustomization, not {kustomization.kind!r}")
    return kustomization


def load_documents(path: Path) -> list[Resource]:
    """The objects of a manifest file; every one needs apiVersion, kind and metadata.name."""
    resources: list[Resource] = []
    for index, document in enumerate(_load_yaml(path)):
        if document is None:
            continue
        where = f"{path} (document {index + 1})"
        if not isinstance(document, dict):
            raise ManifestError(f"{where}: expected a mapping, got {type(document).__name__}")
        name = (document.get("metadata") or {}).get("name")
        if not document.get("apiVersion") or not document.get("kind") or not name:
            raise ManifestError(f"{where}: apiVersion, kind and metadata.name are required")
        resources.append(document)
    return resources


def _fields() -> str:
    return ", ".join(field.alias or name for name, field in Kustomization.model_fields.items())


def _load_yaml(path: Path) -> list[Any]:
    try:
        return list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ManifestError(f"{path}: cannot read YAML: {exc}") from exc


def _build(directory: Path, stack: tuple[Path, ...]) -> list[Resource]:
    if directory in stack:
        cycle = " -> ".join(str(p) for p in (*stack, directory))
        raise ManifestError(f"kustomization cycle: {cycle}")
    path = kustomization_file(directory)
    kustomization = load_kustomization(path)
    resources: list[Resource] = []
    for entry in kustomization.resources:
        target = (directory / entry).resolve()
        if target.is_dir():
            resources.extend(_build(target, (*stack, directory)))
        elif target.is_file():
            resources.extend(load_documents(target))
        else:
            raise ManifestError(f"{path}: resources: {entry!r} is neither a file nor a directory")
    _check_unique(resources, path)
    for index, patch in enumerate(kustomization.patches):
        _apply_patch(resources, patch, directory, f"{path}: patches[{index}]")
    if kustomization.namespace:
        apply_namespace(resources, kustomization.namespace)
    for labels in kustomization.labels:
        if labels.include_selectors:
            raise ManifestError(f"{path}: labels: includeSelectors is not supported")
        apply_labels(resources, labels.pairs, templates=labels.include_templates)
    for replica in kustomization.replicas:
        if not apply_replicas(resources, replica.name, replica.count):
            raise ManifestError(f"{path}: replicas: no workload named {replica.name!r}")
    for image in kustomization.images:
        apply_images(resources, image.name, image.new_name, image.new_tag, image.digest)
    return resources


def _identity(resource: Resource) -> tuple[str, str, str, str]:
    metadata = resource.get("metadata") or {}
    return (
        resource["apiVersion"].split("/")[0] if "/" in resource["apiVersion"] else "",
        resource["kind"],
        metadata.get("namespace") or "",
        metadata["name"],
    )


def _check_unique(resources: list[Resource], path: Path) -> None:
    seen: set[tuple[str, str, str, str]] = set()
    for resource in resources:
        identity = _identity(resource)
        if identity in seen:
            group, kind, namespace, name = identity
            where = f"{namespace}/{name}" if namespace else name
            raise ManifestError(f"{path}: {kind}.{group or 'core'} {where} is defined twice")
        seen.add(identity)


def _patch_documents(patch: Patch, directory: Path, where: str) -> list[Any]:
    if (patch.path is None) == (patch.patch is None):
        raise ManifestError(f"{where}: give exactly one of 'path' and 'patch'")
    if patch.path is not None:
        documents = _load_yaml(directory / patch.path)
    else:
        documents = list(yaml.safe_load_all(patch.patch or ""))
    documents = [document for document in documents if document is not None]
    if not documents:
        raise ManifestError(f"{where}: the patch is empty")
    if any(isinstance(document, list) for document in documents) and len(documents) > 1:
        raise ManifestError(f"{where}: a JSON 6902 patch is one YAML document")
    return documents


def _matches(resource: Resource, target: Target) -> bool:
    group, kind, namespace, name = _identity(resource)
    version = resource["apiVersion"].rsplit("/", 1)[-1]
    wanted = [
        (target.group, group),
        (target.version, version),
        (target.kind, kind),
        (target.name, name),
        (target.namespace, namespace),
    ]
    return all(want is None or re.fullmatch(want, have) for want, have in wanted)


def _apply_patch(resources: list[Resource], patch: Patch, directory: Path, where: str) -> None:
    if patch.path is not None:
        where = f"{where} ({patch.path})"
    for content in _patch_documents(patch, directory, where):
        target = patch.target or _own_target(content, where)
        matched = [resource for resource in resources if _matches(resource, target)]
        if not matched:
            wanted = target.model_dump(exclude_none=True)
            raise ManifestError(f"{where}: no resource matches {wanted}")
        for resource in matched:
            if isinstance(content, list):
                json6902(resource, content, where)
            else:
                strategic_merge(resource, _body(content, targeted=patch.target is not None), where)


def _own_target(content: Any, where: str) -> Target:
    """The resource a strategic merge patch without a target names itself."""
    if isinstance(content, list):
        raise ManifestError(f"{where}: a JSON 6902 patch needs a 'target'")
    if not isinstance(content, dict):
        raise ManifestError(f"{where}: a patch is a mapping (strategic merge) or a list (6902)")
    metadata = content.get("metadata") or {}
    api_version = str(content.get("apiVersion", ""))
    return Target(
        group=re.escape(api_version.split("/")[0]) if "/" in api_version else "",
        kind=re.escape(str(content.get("kind", ""))),
        name=re.escape(str(metadata.get("name", ""))),
        namespace=re.escape(metadata["namespace"]) if "namespace" in metadata else None,
    )


def _body(content: dict[str, Any], *, targeted: bool) -> dict[str, Any]:
    """With a target, the patch's own identity is ignored: only its body is merged."""
    body = copy.deepcopy(content)
    if targeted:
        for key in ("apiVersion", "kind"):
            body.pop(key, None)
        for key in ("name", "namespace"):
            (body.get("metadata") or {}).pop(key, None)
    return body


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.manifest_checks.kustomize DIR``: print it, as ``kubectl kustomize``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tests.manifest_checks.kustomize DIRECTORY", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(render_yaml(Path(args[0])))
    except ManifestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
