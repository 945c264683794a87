"""Deploy the dev overlay on a real cluster, with the envfarm image from the test registry:
the operator becomes Available, the API server admits the example resources and enforces the
CRDs' validation rules (CEL included, which no offline check evaluates). Everything applied is
deleted afterwards unless ENVFARM_K8S_KEEP=1."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s.cluster import Cluster

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
NAMESPACE, SANDBOXES = "envfarm-system", "envfarm-sandboxes"
WAIT = "300s"


def with_image(manifests: str, image: str) -> str:
    """The rendered overlay with the envfarm image's name replaced by ``image``."""
    objects = [obj for obj in yaml.safe_load_all(manifests) if obj]
    for obj in objects:
        pod = obj.get("spec", {}).get("template", {}).get("spec", {})
        containers: list[dict[str, Any]] = [
            *pod.get("containers", []),
            *pod.get("initContainers", []),
        ]
        for container in containers:
            if container.get("image", "").split(":")[0] == "envfarm":
                container["image"] = image
    return yaml.safe_dump_all(objects, sort_keys=False)


@pytest.fixture(scope="module")
def deployed(cluster: Cluster, envfarm_image: str) -> Iterator[str]:
    manifests = with_image(cluster.kustomize(str(MANIFESTS / "overlays/dev")), envfarm_image)
    cluster.kubectl(
        "apply", "--server-side", "--field-manager=envfarm-tests", "-f", "-", stdin=manifests
    )
    yield manifests
    if os.environ.get("ENVFARM_K8S_KEEP") != "1":
        cluster.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=manifests)


def test_the_operator_becomes_available(cluster: Cluster, deployed: str) -> None:
    cluster.kubectl(
        "-n",
        NAMESPACE,
        "wait",
        "--for=condition=Available",
        "deployment/envfarm-operator",
        f"--timeout={WAIT}",
    )


def test_the_example_resources_are_admitted(cluster: Cluster, deployed: str) -> None:
    for crd in ("rolloutjobs.envfarm.dev", "envpools.envfarm.dev"):
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{crd}", f"--timeout={WAIT}")
    for example in ("rolloutjob.yaml", "envpool.yaml", "environment-network-policy.yaml"):
        cluster.kubectl("apply", "--dry-run=server", "-f", str(MANIFESTS / "examples" / example))


def test_the_api_server_enforces_the_crd_rules(cluster: Cluster, deployed: str) -> None:
    job = next(yaml.safe_load_all((MANIFESTS / "examples/rolloutjob.yaml").read_text()))
    job["spec"]["tasks"]["configMap"] = {"name": "also-a-configmap"}  # two sources: CEL rule
    output = cluster.kubectl(
        "apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(job), check=False
    )
    assert "exactly one of configMap, volumeClaim and image" in output
    job["spec"]["tasks"].pop("configMap")
    job["spec"]["groupsize"] = 8  # strict field validation rejects unknown fields
    output = cluster.kubectl(
        "apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(job), check=False
    )
    assert "groupsize" in output


def test_the_envpool_scale_subresource_answers(cluster: Cluster, deployed: str) -> None:
    pool = next(yaml.safe_load_all((MANIFESTS / "examples/envpool.yaml").read_text()))
    pool["metadata"]["name"] = "envfarm-tests-scale"
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(pool))
    try:
        cluster.kubectl(
            "-n", SANDBOXES, "scale", "envpools.envfarm.dev/envfarm-tests-scale", "--replicas=0"
        )
        replicas = cluster.kubectl(
            "-n",
            SANDBOXES,
            "get",
            "envpools.envfarm.dev/envfarm-tests-scale",
            "-o",
            "jsonpath={.spec.replicas}",
        )
        assert replicas.strip() == "0"
    finally:
        cluster.kubectl(
            "-n",
            SANDBOXES,
            "delete",
            "envpools.envfarm.dev/envfarm-tests-scale",
            "--ignore-not-found",
        )
