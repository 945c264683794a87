"""Rendering envfarm's manifests once per test module, and finding objects in a rendering."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

from tests.manifest_checks.kustomize import render
from tests.manifest_checks.structural import instance_schema

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
TARGETS = ("base", "overlays/dev", "overlays/prod")
CONTROL_PLANE, SANDBOXES = "envfarm-system", "envfarm-sandboxes"

Resource = dict[str, Any]


@cache
def _render(target: str) -> tuple[Resource, ...]:
    return tuple(render(MANIFESTS / target))


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


def crd_instance_schemas() -> dict[str, dict[str, Any]]:
    """kind -> JSON Schema of a custom resource, unknown fields rejected."""
    return {
        crd["spec"]["names"]["kind"]: instance_schema(
            crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        )
        for crd in of_kind(rendered("base"), "CustomResourceDefinition")
    }


def examples() -> list[Resource]:
    return [
        document
        for path in sorted((MANIFESTS / "examples").glob("*.yaml"))
        for document in yaml.safe_load_all(path.read_text())
    ]
