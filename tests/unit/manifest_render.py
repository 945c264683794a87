"""Rendering envfarm's manifests once per test session with ``kubectl kustomize``, and finding
objects in a rendering."""

from __future__ import annotations

from functools import cache

import yaml

from tests.manifests import MANIFESTS, Resource, kustomize

TARGETS = ("base", "overlays/dev", "overlays/prod")
CONTROL_PLANE, SANDBOXES = "envfarm-system", "envfarm-sandboxes"


@cache
def _render(target: str) -> tuple[Resource, ...]:
    return tuple(kustomize(MANIFESTS / target))


def rendered(target: str) -> list[Resource]:
    """A fresh copy of the rendering of ``manifests/TARGET`` (tests may mutate it)."""
    copy: list[Resource] = yaml.safe_load(yaml.safe_dump(list(_render(target))))
    return copy


def of_kind(resources: list[Resource], kind: str) -> list[Resource]:
    return [r for r in resources if r["kind"] == kind]


def named(resources: list[Resource], kind: str, name: str, namespace: str = "") -> Resource:
    found = [
        r
        for r in of_kind(resources, kind)
        if r["metadata"]["name"] == name and r["metadata"].get("namespace", "") == namespace
    ]
    assert len(found) == 1, f"{kind} {namespace}/{name}: {len(found)} found"
    return found[0]


def examples() -> list[Resource]:
    return [
        document
        for path in sorted((MANIFESTS / "examples").glob("*.yaml"))
        for document in yaml.safe_load_all(path.read_text())
    ]
