"""The deployable manifests as ``kubectl kustomize`` renders them: every object is valid against
the Kubernetes OpenAPI schemas of pinned versions, the CRDs say what envfarm relies on, and the
overlays set what they promise. Whether the API server accepts the CRDs (structural schemas)
and the examples, and admits the pods, is tested against a real one in ``tests/k8s``."""

from __future__ import annotations

import re
from typing import Any, get_args

import kubernetes_validate
import pytest
import yaml

from envfarm.models.jobs import JobRequest
from envfarm.operator.rolloutjob_spec import OPTIONAL_FIELDS
from tests.manifests import pod_spec_of
from tests.unit.manifest_render import (
    CONTROL_PLANE,
    TARGETS,
    examples,
    named,
    of_kind,
    rendered,
)

# The oldest Kubernetes the manifests support, and one with the websocket attach authorization
# change (1.35); both validated strictly (unknown fields are errors).
KUBERNETES_VERSIONS = ("1.29.0", "1.35.0")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_is_valid_kubernetes(target: str, version: str) -> None:
    resources = rendered(target)
    failures = []
    for resource in resources:
        try:
            kubernetes_validate.validate(resource, version, strict=True)
        except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as e:
            failures.append(f"{resource['kind']} {resource['metadata']['name']}: {e}")
    assert not failures, f"{target} against {version}:\n" + "\n".join(failures)


def test_the_validator_catches_a_misspelled_field() -> None:
    deployment = of_kind(rendered("base"), "Deployment")[0]
    deployment["spec"]["replica"] = 3
    with pytest.raises(kubernetes_validate.ValidationError, match="replica"):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[0], strict=True)


def _declared(schema: dict[str, Any], json_path: str) -> bool:
    """Whether a printer column's JSONPath (``.status.conditions[?(...)].status``) names a field
    the schema declares."""
    node: dict[str, Any] | None = schema
    for part in re.sub(r"\[[^\]]*\]", "", json_path).lstrip(".").split("."):
        if node is not None and node.get("type") == "array":
            node = node.get("items")
        node = None if node is None else (node.get("properties") or {}).get(part)
    return node is not None


def test_the_rolloutjob_schema_keeps_every_field_the_operator_maps() -> None:
    """The API server prunes what the schema does not declare: a field mapped onto the job
    request but missing here would be dropped silently, and its values must be the request's."""
    crd = named(rendered("base"), "CustomResourceDefinition", "rolloutjobs.envfarm.dev")
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    declared = schema["properties"]["spec"]["properties"]
    for field, key in OPTIONAL_FIELDS:
        assert field in declared, field
        choices = [
            value
            for member in get_args(JobRequest.model_fields[key].annotation)
            for value in get_args(member)
        ]
        if choices:
            assert declared[field]["enum"] == choices, field


@pytest.mark.parametrize("target", TARGETS)
def test_the_crds_are_envfarms_and_prune_unknown_fields(target: str) -> None:
    crds = of_kind(rendered(target), "CustomResourceDefinition")
    assert {crd["spec"]["names"]["kind"] for crd in crds} == {"RolloutJob", "EnvPool"}
    for crd in crds:
        assert crd["spec"]["group"] == "envfarm.dev"
        assert crd["spec"]["scope"] == "Namespaced"
        assert [v["name"] for v in crd["spec"]["versions"]] == ["v1alpha1"]
        # Pruning stays on everywhere: the API server drops what the schemas do not declare.
        assert "x-kubernetes-preserve-unknown-fields" not in yaml.safe_dump(crd)
        version = crd["spec"]["versions"][0]
        schema = version["schema"]["openAPIV3Schema"]
        for column in version.get("additionalPrinterColumns", []):
            path = column["jsonPath"]
            assert path.startswith(".metadata.") or _declared(schema, path), column


def test_envpool_scales_through_the_scale_subresource() -> None:
    crd = named(rendered("base"), "CustomResourceDefinition", "envpools.envfarm.dev")
    scale = crd["spec"]["versions"][0]["subresources"]["scale"]
    assert scale == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }


def test_envpool_places_its_pods_with_kubernetes_own_shapes() -> None:
    """``nodeSelector`` and ``tolerations`` are declared (pruning would drop them otherwise)
    with the shapes of a pod's own fields."""
    crd = named(rendered("base"), "CustomResourceDefinition", "envpools.envfarm.dev")
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    selector = spec["properties"]["nodeSelector"]
    assert selector["type"] == "object"
    assert selector["additionalProperties"] == {"type": "string"}
    tolerations = spec["properties"]["tolerations"]
    assert tolerations["type"] == "array"
    toleration = tolerations["items"]
    assert set(toleration["properties"]) == {
        "key",
        "operator",
        "value",
        "effect",
        "tolerationSeconds",
    }
    assert toleration["properties"]["tolerationSeconds"]["type"] == "integer"
    assert set(toleration["properties"]["effect"]["enum"]) == {
        "NoSchedule",
        "PreferNoSchedule",
        "NoExecute",
    }


def test_the_examples_of_builtin_kinds_are_valid() -> None:
    """The RolloutJob and EnvPool examples are for the API server itself (``tests/k8s``)."""
    documents = examples()
    assert {e["kind"] for e in documents} >= {"RolloutJob", "EnvPool", "NetworkPolicy"}
    for example in documents:
        if example["apiVersion"].split("/")[0] != "envfarm.dev":
            kubernetes_validate.validate(example, KUBERNETES_VERSIONS[0], strict=True)


@pytest.mark.parametrize(
    ("target", "image"),
    [
        ("base", "envfarm:latest"),
        ("overlays/dev", "envfarm:dev"),
        ("overlays/prod", "envfarm:0.1.0"),
    ],
)
def test_overlays_choose_the_envfarm_image(target: str, image: str) -> None:
    resources = rendered(target)
    images = {
        container["image"]
        for resource in resources
        if (spec := pod_spec_of(resource)) is not None
        for container in spec["containers"]
        if container["name"] != "postgres"
    }
    assert images == {image}


def test_dev_runs_one_of_everything_with_its_own_postgres() -> None:
    resources = rendered("overlays/dev")
    for name in ("envfarm-operator", "envfarm-api", "envfarm-worker"):
        assert named(resources, "Deployment", name, CONTROL_PLANE)["spec"]["replicas"] == 1
    named(resources, "StatefulSet", "envfarm-postgres", CONTROL_PLANE)
    secrets = {s["metadata"]["name"] for s in of_kind(resources, "Secret")}
    referenced = {
        env["valueFrom"]["secretKeyRef"]["name"]
        for resource in resources
        if (spec := pod_spec_of(resource)) is not None
        for container in spec["containers"]
        for env in container.get("env", [])
        if "secretKeyRef" in env.get("valueFrom", {})
    }
    assert referenced <= secrets


def test_prod_leaves_replicas_to_the_autoscalers() -> None:
    resources = rendered("overlays/prod")
    for name in ("envfarm-api", "envfarm-worker"):
        deployment = named(resources, "Deployment", name, CONTROL_PLANE)
        assert "replicas" not in deployment["spec"]
        autoscaler = named(resources, "HorizontalPodAutoscaler", name, CONTROL_PLANE)
        assert autoscaler["spec"]["scaleTargetRef"]["name"] == name
        assert autoscaler["spec"]["minReplicas"] >= 2
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        assert "--tasks=/tasks" in args
    budget = named(resources, "PodDisruptionBudget", "envfarm-api", CONTROL_PLANE)
    assert budget["spec"] == {
        "minAvailable": 2,
        "selector": {"matchLabels": {"app.kubernetes.io/name": "envfarm-api"}},
    }


@pytest.mark.parametrize("target", TARGETS)
def test_budgets_and_services_select_the_pods_they_mean(target: str) -> None:
    resources = rendered(target)
    templates = {
        r["metadata"]["name"]: r["spec"]["template"]["metadata"]["labels"]
        for r in resources
        if r["kind"] in ("Deployment", "StatefulSet")
    }

    def selected(selector: dict[str, str]) -> set[str]:
        return {n for n, labels in templates.items() if selector.items() <= labels.items()}

    for budget in of_kind(resources, "PodDisruptionBudget"):
        assert selected(budget["spec"]["selector"]["matchLabels"]) == {budget["metadata"]["name"]}
    for service in of_kind(resources, "Service"):
        assert selected(service["spec"]["selector"]) == {service["metadata"]["name"]}


@pytest.mark.parametrize("target", TARGETS)
def test_controllers_know_their_own_pod(target: str) -> None:
    """The API and the workers read their pod from the downward API, to own the environment
    pods they start (``envfarm.sandbox.kubernetes.ownerpod``)."""
    resources = rendered(target)
    fields = {
        "ENVFARM_POD_NAME": "metadata.name",
        "ENVFARM_POD_UID": "metadata.uid",
        "ENVFARM_POD_NAMESPACE": "metadata.namespace",
    }
    for name in ("envfarm-api", "envfarm-worker"):
        deployment = named(resources, "Deployment", name, CONTROL_PLANE)
        env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        found = {
            e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in env if e["name"] in fields
        }
        assert found == fields, name
