"""The deployable manifests render the same with our kustomize and kubectl's, every object is
valid against the Kubernetes OpenAPI schemas of pinned versions, the CRDs are structural and
the overlays set what they promise."""

from __future__ import annotations

import shutil
import subprocess

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.manifest_checks.kustomize import render
from tests.manifest_checks.podsecurity import pod_spec_of
from tests.manifest_checks.structural import crd_problems
from tests.unit.manifest_render import (
    CONTROL_PLANE,
    MANIFESTS,
    TARGETS,
    crd_instance_schemas,
    examples,
    named,
    of_kind,
    rendered,
)

# The oldest Kubernetes the manifests support, and one with the websocket attach authorization
# change (1.35); both validated strictly (unknown fields are errors).
KUBERNETES_VERSIONS = ("1.29.0", "1.35.0")


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")
@pytest.mark.parametrize("target", TARGETS)
def test_our_renderer_gives_exactly_what_kubectl_kustomize_gives(target: str) -> None:
    result = subprocess.run(
        ["kubectl", "kustomize", str(MANIFESTS / target)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert render(MANIFESTS / target) == list(yaml.safe_load_all(result.stdout))


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


@pytest.mark.parametrize("target", TARGETS)
def test_crd_schemas_are_structural(target: str) -> None:
    crds = of_kind(rendered(target), "CustomResourceDefinition")
    assert {crd["spec"]["names"]["kind"] for crd in crds} == {"RolloutJob", "EnvPool"}
    for crd in crds:
        assert crd["spec"]["group"] == "envfarm.dev"
        assert crd["spec"]["scope"] == "Namespaced"
        assert [v["name"] for v in crd["spec"]["versions"]] == ["v1alpha1"]
        assert crd_problems(crd) == []


def test_envpool_scales_through_the_scale_subresource() -> None:
    crd = named(rendered("base"), "CustomResourceDefinition", "envpools.envfarm.dev")
    scale = crd["spec"]["versions"][0]["subresources"]["scale"]
    assert scale == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }


def test_the_examples_are_valid() -> None:
    schemas = crd_instance_schemas()
    documents = examples()
    assert {e["kind"] for e in documents} >= {"RolloutJob", "EnvPool", "NetworkPolicy"}
    for example in documents:
        if example["kind"] in schemas:
            jsonschema.Draft4Validator(schemas[example["kind"]]).validate(example)
        else:
            kubernetes_validate.validate(example, KUBERNETES_VERSIONS[0], strict=True)


def test_a_rollout_job_with_an_unknown_or_bad_field_is_rejected() -> None:
    validator = jsonschema.Draft4Validator(crd_instance_schemas()["RolloutJob"])
    job = next(e for e in examples() if e["kind"] == "RolloutJob")
    assert not list(validator.iter_errors(job))
    for bad, expected in (
        ({"groupsize": 8}, "groupsize"),
        ({"groupSize": 0}, "minimum"),
        ({"stalePolicy": "ignore"}, "ignore"),
        ({"sampling": {"topP": 0}}, "minimum"),
        ({"environment": {"runtimeClassName": "gvisor"}}, "environment"),  # not a field
    ):
        errors = [e.message for e in validator.iter_errors({**job, "spec": {**job["spec"], **bad}})]
        assert any(expected in message or "less than" in message for message in errors), errors


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
