"""Checks that a CustomResourceDefinition's schemas are structural, as the API server demands.

An ``apiextensions.k8s.io/v1`` CRD is rejected (or silently loses pruning and defaulting) when
its OpenAPI v3 schema is not *structural*. The rules checked here are the API server's:

- every node has a ``type`` (one of the six JSON types), except under
  ``x-kubernetes-int-or-string`` or ``x-kubernetes-preserve-unknown-fields``;
- ``allOf``/``anyOf``/``oneOf``/``not`` only restrict fields also declared outside them, and set
  no ``type``, ``description``, ``default``, ``additionalProperties`` or ``nullable``;
- ``metadata`` at the root restricts nothing but ``name`` and ``generateName``;
- ``properties`` and ``additionalProperties`` exclude each other, ``additionalProperties`` is
  never ``false``, ``items`` is one schema, ``uniqueItems`` is never true, and none of
  ``$ref``, ``definitions``, ``dependencies``, ``deprecated``, ``discriminator``, ``id``,
  ``patternProperties``, ``readOnly``, ``writeOnly``, ``xml`` appears;
- ``x-kubernetes-preserve-unknown-fields`` is ``true`` when set, and only at the paths the
  caller allows (it switches pruning off below it, so each use must be deliberate);
- list types (``x-kubernetes-list-type``) are well formed: a ``map`` list names its keys, and
  each key is a required or defaulted scalar field of the items;
- defaults and enum values have the node's type.

Beyond structure, the CRD's printer columns and scale subresource must point at fields the
schema declares.
"""

from __future__ import annotations

import re
from typing import Any

JSON_TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean"})
FORBIDDEN = (
    "$ref",
    "$schema",
    "definitions",
    "dependencies",
    "deprecated",
    "discriminator",
    "id",
    "patternProperties",
    "readOnly",
    "writeOnly",
    "xml",
)
JUNCTORS = ("allOf", "anyOf", "oneOf", "not")
NOT_IN_JUNCTORS = ("type", "description", "default", "additionalProperties", "nullable")
SCALARS = frozenset({"string", "integer", "number", "boolean"})

Schema = dict[str, Any]


def _type_ok(value: Any, kind: str | None) -> bool:
    checks: dict[str, Any] = {
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
    }
    return kind is None or kind not in checks or bool(checks[kind](value))


class _Checker:
    def __init__(self, allowed_unknown: frozenset[str]) -> None:
        self.allowed_unknown = allowed_unknown
        self.problems: list[str] = []

    def fail(self, path: str, message: str) -> None:
        self.problems.append(f"{path or '<root>'}: {message}")

    def node(self, schema: Any, path: str, *, in_junctor: bool = False) -> None:
        if not isinstance(schema, dict):
            self.fail(path, "a schema must be a mapping")
            return
        for key in FORBIDDEN:
            if key in schema:
                self.fail(path, f"{key!r} is not allowed in a CRD schema")
        if schema.get("uniqueItems") is True:
            self.fail(path, "uniqueItems: true is not allowed (quadratic validation)")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields")
        if preserve is not None and preserve is not True:
            self.fail(path, "x-kubernetes-preserve-unknown-fields must be true when set")
        if preserve and path not in self.allowed_unknown:
            self.fail(path, "x-kubernetes-preserve-unknown-fields is not allowed here")
        int_or_string = schema.get("x-kubernetes-int-or-string") is True
        kind = schema.get("type")
        if in_junctor:
            self.junctor_node(schema, path)
        elif int_or_string:
            if kind is not None:
                self.fail(path, "x-kubernetes-int-or-string excludes 'type'")
        elif kind is None and not preserve:
            self.fail(path, "no type (a structural schema types every node)")
        if kind is not None and kind not in JSON_TYPES:
            self.fail(path, f"unknown type {kind!r}")
        self.values(schema, path, kind)
        self.children(schema, path, kind, in_junctor=in_junctor)
        self.list_type(schema, path, kind)
        for junctor in JUNCTORS:
            if junctor in schema:
                self.junctor(schema, junctor, path, int_or_string=int_or_string)

    def junctor_node(self, schema: Schema, path: str) -> None:
        for key in NOT_IN_JUNCTORS:
            if key in schema:
                self.fail(path, f"{key!r} is not allowed inside allOf/anyOf/oneOf/not")

    def values(self, schema: Schema, path: str, kind: str | None) -> None:
        if "default" in schema and not _type_ok(schema["default"], kind):
            self.fail(path, f"default {schema['default']!r} is not of type {kind}")
        for value in schema.get("enum") or []:
            if not _type_ok(value, kind):
                self.fail(path, f"enum value {value!r} is not of type {kind}")

    def children(self, schema: Schema, path: str, kind: str | None, *, in_junctor: bool) -> None:
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        if properties is not None and additional is not None:
            self.fail(path, "properties and additionalProperties exclude each other")
        if additional is False:
            self.fail(
                path, "additionalProperties: false is not allowed (unknown fields are pruned)"
            )
        if (properties is not None or isinstance(additional, dict)) and kind not in (
            None,
            "object",
        ):
            self.fail(path, f"properties on a node of type {kind}")
        for name, child in (properties or {}).items():
            self.node(child, f"{path}.{name}", in_junctor=in_junctor)
        if isinstance(additional, dict):
            self.node(additional, f"{path}.*", in_junctor=in_junctor)
        if "items" in schema:
            if isinstance(schema["items"], list):
                self.fail(path, "items must be one schema, not a list")
            else:
                self.node(schema["items"], f"{path}[]", in_junctor=in_junctor)
        elif kind == "array" and not in_junctor:
            self.fail(path, "an array needs an items schema")

    def list_type(self, schema: Schema, path: str, kind: str | None) -> None:
        list_type = schema.get("x-kubernetes-list-type")
        keys = schema.get("x-kubernetes-list-map-keys")
        if list_type is None:
            if keys is not None:
                self.fail(path, "x-kubernetes-list-map-keys needs x-kubernetes-list-type: map")
            return
        if kind != "array":
            self.fail(path, "x-kubernetes-list-type on a node that is not an array")
        if list_type not in ("atomic", "set", "map"):
            self.fail(path, f"unknown x-kubernetes-list-type {list_type!r}")
        items = schema.get("items") if isinstance(schema.get("items"), dict) else {}
        assert isinstance(items, dict)
        if list_type == "set" and items.get("type") not in SCALARS:
            self.fail(path, "a set list needs scalar items")
        if list_type != "map":
            return
        if not keys:
            self.fail(path, "a map list needs x-kubernetes-list-map-keys")
            return
        required = set(items.get("required") or [])
        for key in keys:
            field = (items.get("properties") or {}).get(key)
            if not isinstance(field, dict) or field.get("type") not in SCALARS:
                self.fail(path, f"map key {key!r} must be a scalar field of the items")
            elif key not in required and "default" not in field:
                self.fail(path, f"map key {key!r} must be required or defaulted")

    def junctor(self, schema: Schema, junctor: str, path: str, *, int_or_string: bool) -> None:
        branches = schema[junctor] if junctor != "not" else [schema[junctor]]
        if int_or_string and junctor in ("anyOf", "allOf"):
            allowed = [{"type": "integer"}, {"type": "string"}]
            if all(branch in allowed for branch in branches):
                return
        for index, branch in enumerate(branches):
            where = f"{path}.{junctor}[{index}]"
            self.node(branch, where, in_junctor=True)
            if isinstance(branch, dict):
                self.declared_outside(schema, branch, where)

    def declared_outside(self, outer: Schema, branch: Schema, where: str) -> None:
        declared = set((outer.get("properties") or {}).keys())
        for name in branch.get("properties") or {}:
            if name not in declared and not isinstance(outer.get("additionalProperties"), dict):
                self.fail(where, f"field {name!r} is not declared outside the junctor")
        if "items" in branch and "items" not in outer:
            self.fail(where, "items are not declared outside the junctor")

    def root(self, schema: Schema) -> None:
        if schema.get("type") != "object":
            self.fail("", "the root must have type: object")
        metadata = (schema.get("properties") or {}).get("metadata")
        if isinstance(metadata, dict):
            extra = set(metadata) - {"type", "properties"}
            if extra or set(metadata.get("properties") or {}) - {"name", "generateName"}:
                self.fail(
                    ".metadata", "only metadata.name and metadata.generateName may be restricted"
                )
        self.node(schema, "")


def schema_problems(schema: Schema, *, allowed_unknown: frozenset[str] = frozenset()) -> list[str]:
    """Why ``schema`` (an openAPIV3Schema) is not structural; empty when it is.

    ``allowed_unknown`` lists the dotted paths (``.spec.template``) where
    ``x-kubernetes-preserve-unknown-fields`` is documented and therefore allowed.
    """
    checker = _Checker(allowed_unknown)
    checker.root(schema)
    return checker.problems


def field_at(schema: Schema, json_path: str) -> Schema | None:
    """The schema node a simple JSONPath (``.status.conditions[?(@.type=="Ready")].status``)
    points at, or None when the schema does not declare it."""
    node: Schema | None = schema
    for raw in re.sub(r"\[[^\]]*\]", "[]", json_path).lstrip(".").split("."):
        part, _, rest = raw.partition("[")
        if node is None:
            return None
        node = (node.get("properties") or {}).get(part)
        if node is not None and rest:
            node = node.get("items")
    return node


def crd_problems(
    crd: dict[str, Any], *, allowed_unknown: frozenset[str] = frozenset()
) -> list[str]:
    """Structural-schema problems of every version of a CRD, plus printer columns and scale
    subresource paths that point nowhere. Each problem names the CRD and the version."""
    name = crd.get("metadata", {}).get("name", "?")
    spec = crd.get("spec", {})
    problems: list[str] = []
    plural, group = spec.get("names", {}).get("plural"), spec.get("group")
    if name != f"{plural}.{group}":
        problems.append(f"{name}: the name must be <plural>.<group> ({plural}.{group})")
    versions = spec.get("versions") or []
    if sum(1 for version in versions if version.get("storage")) != 1:
        problems.append(f"{name}: exactly one version must be the storage version")
    for version in versions:
        where = f"{name} {version.get('name')}"
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if not isinstance(schema, dict):
            problems.append(f"{where}: no openAPIV3Schema")
            continue
        problems += [
            f"{where}: {p}" for p in schema_problems(schema, allowed_unknown=allowed_unknown)
        ]
        for column in version.get("additionalPrinterColumns") or []:
            if field_at(schema, column["jsonPath"]) is None and not column["jsonPath"].startswith(
                ".metadata."
            ):
                problems.append(f"{where}: printer column {column['name']!r} points nowhere")
        scale = (version.get("subresources") or {}).get("scale")
        if scale:
            problems += _scale_problems(schema, scale, where)
    return problems


def _scale_problems(schema: Schema, scale: dict[str, Any], where: str) -> list[str]:
    problems: list[str] = []
    wanted = {
        "specReplicasPath": ((".spec.",), "integer"),
        "statusReplicasPath": ((".status.",), "integer"),
        "labelSelectorPath": ((".status.", ".spec."), "string"),
    }
    for key, (prefixes, kind) in wanted.items():
        path = scale.get(key)
        if path is None:
            continue
        node = field_at(schema, path)
        if not path.startswith(prefixes) or node is None or node.get("type") != kind:
            under = " or ".join(prefixes)
            problems.append(f"{where}: scale {key} {path} must be a declared {kind} under {under}")
    return problems


def instance_schema(schema: Schema) -> Schema:
    """``schema`` as a JSON Schema (draft 4) that rejects unknown fields, for checking example
    objects the way ``kubectl apply`` (strict field validation) does. CEL rules
    (``x-kubernetes-validations``) are only evaluated by a real API server."""
    strict = _strict(schema)
    strict.setdefault("properties", {})["metadata"] = {"type": "object"}
    return strict


def _strict(schema: Schema) -> Schema:
    strict: Schema = {k: v for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if "properties" in schema:
        strict["properties"] = {
            name: _strict(child) for name, child in schema["properties"].items()
        }
        if not schema.get("x-kubernetes-preserve-unknown-fields"):
            strict["additionalProperties"] = False
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            strict[key] = _strict(schema[key])
    return strict
