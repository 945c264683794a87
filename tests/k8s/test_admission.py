"""The API server's own admission of what envfarm ships, with no check of ours in between.

- The CRDs: the API server refuses a CRD whose schema is not structural, so its accepting them
  is the structural check; the examples are then validated against them (strict fields, CEL).
- Pod Security: every rendered pod template (base, dev, prod) is admitted by a namespace
  labelled as the manifests label the namespace it runs in, and the pod builder's pod for every
  example task by one labelled as the sandboxes' namespace ("baseline").

Each check is shown to bite: a non-structural CRD, bad RolloutJob fields and a privileged pod
are refused. Everything here runs in objects of its own (namespaces, a CRD group and a
RuntimeClass with a random suffix), so other tests on the same cluster are left alone, and is
deleted afterwards; pods are only ever dry-run.
"""

from __future__ import annotations

import copy
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.k8s.cluster import Cluster
from tests.manifests import MANIFESTS, Resource, environment_pods, pod_spec_of

PREFIX = f"envfarm-adm-{uuid.uuid4().hex[:8]}"
GROUP = f"{PREFIX.removeprefix('envfarm-')}.envfarm.dev"
TARGETS = ("base", "overlays/dev", "overlays/prod")
SANDBOXES = "envfarm-sandboxes"
ENFORCE = "pod-security.kubernetes.io/enforce"
WAIT = "120s"


def _render(cluster: Cluster, target: str) -> list[Resource]:
    return [o for o in yaml.safe_load_all(cluster.kustomize(str(MANIFESTS / target))) if o]


def _dump(objects: list[Resource]) -> str:
    """``objects`` as a stream of JSON documents: kubectl reads YAML as YAML 1.1, where an
    unquoted string such as y is a boolean, and PyYAML does not quote it."""
    return "\n---\n".join(json.dumps(o) for o in objects)


def _dry_run(cluster: Cluster, objects: list[Resource], *, check: bool = True) -> str:
    return cluster.kubectl(
        "create", "--dry-run=server", "-f", "-", stdin=_dump(objects), check=check
    )


def _own_group(crd: Resource, group: str) -> Resource:
    """``crd`` in an API group of this module's: its own name, whatever the cluster holds."""
    crd = copy.deepcopy(crd)
    crd["spec"]["group"] = group
    crd["metadata"]["name"] = f"{crd['spec']['names']['plural']}.{group}"
    return crd


def _crds(cluster: Cluster, target: str = "base", group: str = f"dry.{GROUP}") -> list[Resource]:
    """The CRDs ``target`` renders, in ``group`` (one only dry-runs use, by default)."""
    crds = [o for o in _render(cluster, target) if o["kind"] == "CustomResourceDefinition"]
    assert {crd["spec"]["names"]["kind"] for crd in crds} == {"RolloutJob", "EnvPool"}
    return [_own_group(crd, group) for crd in crds]


@pytest.mark.parametrize("target", TARGETS)
def test_the_api_server_accepts_the_crds(cluster: Cluster, target: str) -> None:
    _dry_run(cluster, _crds(cluster, target))


def test_the_api_server_refuses_a_non_structural_crd(cluster: Cluster) -> None:
    crd = next(c for c in _crds(cluster) if c["spec"]["names"]["kind"] == "RolloutJob")
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"]["properties"]["untyped"] = {"description": "no type"}
    output = _dry_run(cluster, [crd], check=False)
    assert "properties[untyped].type: Required value" in output, output
    assert "created" not in output, output


@pytest.fixture(scope="module")
def crd_group(cluster: Cluster) -> Iterator[str]:
    """The base CRDs created in this module's own group; the group's name."""
    crds = _crds(cluster, group=GROUP)
    names = [f"crd/{crd['metadata']['name']}" for crd in crds]
    cluster.kubectl("create", "-f", "-", stdin=_dump(crds))
    try:
        cluster.kubectl("wait", "--for=condition=Established", *names, f"--timeout={WAIT}")
        yield GROUP
    finally:
        cluster.kubectl("delete", "--ignore-not-found", "--wait=false", *names)


def _in(objects: list[Resource], namespace: str) -> list[Resource]:
    for obj in objects:
        obj["metadata"]["namespace"] = namespace
    return objects


@pytest.fixture(scope="module")
def namespaces(cluster: Cluster) -> Iterator[dict[str, str]]:
    """A namespace of this module's for each of the manifests' namespaces, with its labels
    (the Pod Security levels) and its ServiceAccounts; manifest namespace -> ours."""
    rendered = _render(cluster, "base")
    ours = {
        n["metadata"]["name"]: f"{PREFIX}-{n['metadata']['name'].removeprefix('envfarm-')}"
        for n in rendered
        if n["kind"] == "Namespace"
    }
    created: list[Resource] = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ours[n["metadata"]["name"]], "labels": n["metadata"]["labels"]},
        }
        for n in rendered
        if n["kind"] == "Namespace"
    ]
    assert {n["metadata"]["labels"][ENFORCE] for n in created} == {"restricted", "baseline"}
    accounts: list[Resource] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {
                "name": a["metadata"]["name"],
                "namespace": ours[a["metadata"]["namespace"]],
            },
        }
        for a in rendered
        if a["kind"] == "ServiceAccount"
    ]
    runtime = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": PREFIX},
        "handler": "runsc",
    }
    try:
        cluster.kubectl("create", "-f", "-", stdin=_dump([*created, runtime]))
        cluster.kubectl("create", "-f", "-", stdin=_dump(accounts))
        yield ours
    finally:
        cluster.kubectl(
            "delete", "--ignore-not-found", "--wait=false", f"runtimeclass/{PREFIX}",
            *(f"namespace/{name}" for name in ours.values()),
        )  # fmt: skip


def test_the_examples_are_valid_custom_resources(
    cluster: Cluster, crd_group: str, namespaces: dict[str, str]
) -> None:
    examples = [
        document
        for name in ("rolloutjob.yaml", "envpool.yaml")
        for document in yaml.safe_load_all((MANIFESTS / "examples" / name).read_text())
    ]
    for example in examples:
        example["apiVersion"] = f"{crd_group}/v1alpha1"
    assert {e["kind"] for e in examples} == {"RolloutJob", "EnvPool"}
    _dry_run(cluster, _in(examples, namespaces[SANDBOXES]))


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        ({"groupsize": 8}, 'unknown field "spec.groupsize"'),
        ({"groupSize": 0}, "spec.groupSize"),
        ({"stalePolicy": "ignore"}, "spec.stalePolicy"),
        ({"sampling": {"topP": 0}}, "spec.sampling.topP"),
        ({"environment": {"runtimeClassName": "gvisor"}}, 'unknown field "spec.environment"'),
        (
            {"tasks": {"image": {"reference": "x"}, "configMap": {"name": "y"}}},
            "exactly one of configMap, volumeClaim and image",
        ),
    ],
)
def test_the_api_server_refuses_bad_rollout_jobs(
    cluster: Cluster, crd_group: str, namespaces: dict[str, str], bad: dict[str, Any], expected: str
) -> None:
    job = next(yaml.safe_load_all((MANIFESTS / "examples/rolloutjob.yaml").read_text()))
    job["apiVersion"] = f"{crd_group}/v1alpha1"
    job["spec"] = {**job["spec"], **bad}
    output = _dry_run(cluster, _in([job], namespaces[SANDBOXES]), check=False)
    assert expected in output, output
    assert "created" not in output, output


def _pods_of(resources: list[Resource], prefix: str) -> list[Resource]:
    """A Pod for each workload's template, as its controller would create it."""
    pods = []
    for workload in resources:
        spec = pod_spec_of(workload)
        if spec is None:
            continue
        claims = workload["spec"].get("volumeClaimTemplates", [])
        spec.setdefault("volumes", []).extend(
            {
                "name": claim["metadata"]["name"],
                "persistentVolumeClaim": {
                    "claimName": f"{claim['metadata']['name']}-{workload['metadata']['name']}-0"
                },
            }
            for claim in claims
        )  # a StatefulSet adds its claims' volumes
        metadata = workload["spec"]["template"].get("metadata", {})
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{prefix}-{workload['metadata']['name']}",
                    "namespace": workload["metadata"]["namespace"],
                    "labels": metadata.get("labels", {}),
                },
                "spec": spec,
            }
        )
    return pods


def _privileged(pod: Resource) -> Resource:
    pod = copy.deepcopy(pod)
    pod["metadata"]["name"] += "-privileged"
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    return pod


def test_pod_security_admits_every_rendered_pod_template(
    cluster: Cluster, namespaces: dict[str, str]
) -> None:
    pods = [
        pod
        for target in TARGETS
        for pod in _pods_of(_render(cluster, target), target.rsplit("/", 1)[-1])
    ]
    assert pods
    for pod in pods:
        pod["metadata"]["namespace"] = namespaces[pod["metadata"]["namespace"]]
    output = _dry_run(cluster, pods)
    assert output.count("created (server dry run)") == len(pods), output
    refused = _dry_run(cluster, [_privileged(pods[0])], check=False)
    assert re.search(r'violates PodSecurity "restricted:[^"]+": privileged', refused), refused


def test_pod_security_admits_the_environment_pods(
    cluster: Cluster, namespaces: dict[str, str]
) -> None:
    pods = _in(environment_pods(runtime_class=PREFIX), namespaces[SANDBOXES])
    assert len(pods) >= 10
    output = _dry_run(cluster, pods)
    assert output.count("created (server dry run)") == len(pods), output
    refused = _dry_run(cluster, [_privileged(pods[0])], check=False)
    assert re.search(r'violates PodSecurity "baseline:[^"]+": privileged', refused), refused
