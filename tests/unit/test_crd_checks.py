"""The structural-schema checker and the Pod Security checker catch each rule they enforce."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.manifest_checks.podsecurity import pod_security_problems, pod_spec_of
from tests.manifest_checks.structural import crd_problems, schema_problems

GOOD: dict[str, Any] = {
    "type": "object",
    "properties": {
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "properties": {
                "replicas": {"type": "integer", "default": 1},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "items": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {"name": {"type": "string"}},
                    },
                },
                "port": {
                    "x-kubernetes-int-or-string": True,
                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                },
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "choice": {
                    "type": "object",
                    "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                    "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
                },
            },
        },
        "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
    },
}


def _spec(schema: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = schema["properties"]["spec"]["properties"]
    return result


def test_a_structural_schema_passes() -> None:
    assert schema_problems(GOOD) == []


def _break(change: Any) -> list[str]:
    schema = copy.deepcopy(GOOD)
    change(schema)
    return schema_problems(schema)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: _spec(s)["replicas"].pop("type"), "no type"),
        (lambda s: _spec(s)["replicas"].update(type="int"), "unknown type"),
        (lambda s: _spec(s)["labels"].update(properties={}), "exclude each other"),
        (lambda s: _spec(s)["labels"].update(additionalProperties=False), "false"),
        (
            lambda s: _spec(s).update(raw={"x-kubernetes-preserve-unknown-fields": True}),
            "not allowed",
        ),
        (
            lambda s: _spec(s).update(
                raw={"type": "object", "x-kubernetes-preserve-unknown-fields": False}
            ),
            "must be true",
        ),
        (lambda s: _spec(s)["choice"]["oneOf"].append({"type": "object"}), "inside allOf"),
        (lambda s: _spec(s)["choice"]["oneOf"].append({"properties": {"c": {}}}), "'c'"),
        (lambda s: s["properties"]["metadata"].update(properties={"labels": {}}), "metadata"),
        (lambda s: _spec(s)["items"]["items"].pop("required"), "required or defaulted"),
        (lambda s: _spec(s)["items"].pop("x-kubernetes-list-map-keys"), "list-map-keys"),
        (lambda s: _spec(s)["items"].update(uniqueItems=True), "uniqueItems"),
        (lambda s: _spec(s).update(ref={"$ref": "#/x", "type": "object"}), "$ref"),
        (lambda s: _spec(s)["replicas"].update(default="1"), "default"),
        (lambda s: _spec(s)["mode"].update(enum=["a", 2]), "enum value 2"),
        (lambda s: _spec(s)["items"].pop("items"), "needs an items"),
        (lambda s: _spec(s)["port"].update(type="string"), "excludes 'type'"),
        (lambda s: s.update(type="array"), "root"),
    ],
)
def test_each_structural_rule_is_enforced(change: Any, message: str) -> None:
    problems = _break(change)
    assert any(message in problem for problem in problems), problems


def test_preserve_unknown_fields_is_allowed_where_documented() -> None:
    schema = copy.deepcopy(GOOD)
    _spec(schema)["raw"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert schema_problems(schema, allowed_unknown=frozenset({".spec.raw"})) == []


def _crd(**version: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "things.example.dev"},
        "spec": {
            "group": "example.dev",
            "names": {"plural": "things"},
            "versions": [
                {"name": "v1", "storage": True, "schema": {"openAPIV3Schema": GOOD}, **version}
            ],
        },
    }


def test_printer_columns_and_scale_paths_must_exist() -> None:
    assert crd_problems(_crd()) == []
    columns = [{"name": "Mode", "type": "string", "jsonPath": ".spec.mood"}]
    assert "points nowhere" in crd_problems(_crd(additionalPrinterColumns=columns))[0]
    scale = {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".spec.replicas"}
    assert "statusReplicasPath" in crd_problems(_crd(subresources={"scale": scale}))[0]


POD = {
    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [
        {
            "name": "app",
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            },
        }
    ],
    "volumes": [{"name": "tmp", "emptyDir": {}}],
}


@pytest.mark.parametrize(
    ("change", "level", "message"),
    [
        (lambda p: p.update(hostNetwork=True), "baseline", "hostNetwork"),
        (
            lambda p: p["containers"][0]["securityContext"].update(privileged=True),
            "baseline",
            "privileged",
        ),
        (
            lambda p: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
            "baseline",
            "hostPath",
        ),
        (
            lambda p: p["containers"][0].update(ports=[{"containerPort": 1, "hostPort": 1}]),
            "baseline",
            "host ports",
        ),
        (
            lambda p: p["containers"][0]["securityContext"]["capabilities"].update(
                add=["SYS_ADMIN"]
            ),
            "baseline",
            "SYS_ADMIN",
        ),
        (lambda p: p["securityContext"].update(runAsNonRoot=False), "restricted", "runAsNonRoot"),
        (lambda p: p["securityContext"].update(runAsUser=0), "restricted", "runAsUser"),
        (
            lambda p: p["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
            "restricted",
            "allowPrivilegeEscalation",
        ),
        (lambda p: p["securityContext"].pop("seccompProfile"), "restricted", "seccompProfile"),
        (
            lambda p: p["containers"][0]["securityContext"]["capabilities"].update(drop=[]),
            "restricted",
            "drop",
        ),
        (
            lambda p: p["volumes"].append({"name": "n", "nfs": {"server": "x", "path": "/"}}),
            "restricted",
            "nfs",
        ),
    ],
)
def test_each_pod_security_rule_is_enforced(change: Any, level: Any, message: str) -> None:
    spec = copy.deepcopy(POD)
    assert pod_security_problems(spec, "restricted") == []
    change(spec)
    problems = pod_security_problems(spec, level)
    assert any(message in problem for problem in problems), problems


def test_root_with_capabilities_is_baseline_but_not_restricted() -> None:
    spec = {
        "containers": [{"name": "db", "securityContext": {"capabilities": {"add": ["SETUID"]}}}]
    }
    assert pod_security_problems(spec, "baseline") == []
    assert pod_security_problems(spec, "restricted")


def test_pod_specs_are_found_in_every_workload_kind() -> None:
    template = {"template": {"spec": POD}}
    assert pod_spec_of({"kind": "Pod", "spec": POD}) == POD
    assert pod_spec_of({"kind": "StatefulSet", "spec": template}) == POD
    assert pod_spec_of({"kind": "CronJob", "spec": {"jobTemplate": {"spec": template}}}) == POD
    assert pod_spec_of({"kind": "Service", "spec": {}}) is None
