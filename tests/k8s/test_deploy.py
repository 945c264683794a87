"""Deploy the dev overlay on a real cluster, with the envfarm image and envfarm's own image for
the overlay's ``postgres:16`` from the test registry, as a user without a public registry
does: PostgreSQL becomes Ready, the operator, API and worker Deployments Available, the API
answers through its Service and reads the database; the API server admits the example
resources and enforces the CRDs' validation rules (CEL included, which no offline check
evaluates). Everything applied is deleted afterwards unless ENVFARM_K8S_KEEP=1."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from envfarm.sandbox.docker.images.task_images import ensure_recipe_image
from envfarm.sandbox.images.aliases import match_alias
from tests.k8s.cluster import Cluster

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
NAMESPACE, SANDBOXES = "envfarm-system", "envfarm-sandboxes"
WAIT = "300s"


def with_images(manifests: str, images: dict[str, str]) -> str:
    """The rendered overlay with each image named in ``images`` (by its name without the tag)
    replaced, as a kustomize ``images:`` entry in the overlay would."""
    objects = [obj for obj in yaml.safe_load_all(manifests) if obj]
    for obj in objects:
        pod = obj.get("spec", {}).get("template", {}).get("spec", {})
        containers: list[dict[str, Any]] = [
            *pod.get("containers", []),
            *pod.get("initContainers", []),
        ]
        for container in containers:
            name = container.get("image", "").split(":")[0]
            container["image"] = images.get(name, container["image"])
    return yaml.safe_dump_all(objects, sort_keys=False)


@pytest.fixture(scope="module")
def postgres_image(cluster: Cluster) -> str:
    """The image the alias table gives ``postgres:16`` (envfarm's PostgreSQL, built from Debian
    packages), pushed to the test registry under its content tag."""
    match = match_alias("postgres:16")
    assert match is not None
    local = asyncio.run(ensure_recipe_image(match.recipe)).tag
    remote = f"{cluster.registry}/{local}"
    for command in (["tag", local, remote], ["push", "-q", remote], ["rmi", remote]):
        subprocess.run(["docker", *command], check=True, capture_output=True, timeout=600)
    return remote


@pytest.fixture(scope="module")
def deployed(cluster: Cluster, envfarm_image: str, postgres_image: str) -> Iterator[str]:
    rendered = cluster.kustomize(str(MANIFESTS / "overlays/dev"))
    manifests = with_images(rendered, {"envfarm": envfarm_image, "postgres": postgres_image})
    cluster.kubectl(
        "apply", "--server-side", "--field-manager=envfarm-tests", "-f", "-", stdin=manifests
    )
    replace_stuck_database(cluster)
    yield manifests
    if os.environ.get("ENVFARM_K8S_KEEP") != "1":
        # waited for: the next modules need the node's CPU back and the CRDs established anew
        cluster.kubectl(
            "delete", "--ignore-not-found", "--timeout=300s", "-f", "-", stdin=manifests
        )


def replace_stuck_database(cluster: Cluster) -> None:
    """A StatefulSet's rolling update waits for a pod that never became Ready (one whose image
    could not be pulled, from an earlier apply) instead of replacing it: delete such a pod, and
    the controller makes it again from the template just applied."""
    image = "jsonpath={.spec.template.spec.containers[0].image}"
    wanted = cluster.kubectl("-n", NAMESPACE, "get", "statefulset/envfarm-postgres", "-o", image)
    running = cluster.kubectl(
        *("-n", NAMESPACE, "get", "pod/envfarm-postgres-0", "--ignore-not-found"),
        *("-o", "jsonpath={.spec.containers[0].image}"),
    )
    if running and running != wanted:
        cluster.kubectl("-n", NAMESPACE, "delete", "pod/envfarm-postgres-0", "--wait=false")


def test_the_operator_becomes_available(cluster: Cluster, deployed: str) -> None:
    cluster.kubectl(
        "-n",
        NAMESPACE,
        "wait",
        "--for=condition=Available",
        "deployment/envfarm-operator",
        f"--timeout={WAIT}",
    )


def test_postgres_becomes_ready(cluster: Cluster, deployed: str) -> None:
    cluster.kubectl(
        "-n", NAMESPACE, "rollout", "status", "statefulset/envfarm-postgres", f"--timeout={WAIT}"
    )


def test_the_api_and_the_worker_become_available(cluster: Cluster, deployed: str) -> None:
    for deployment in ("envfarm-api", "envfarm-worker"):
        cluster.kubectl(
            *("-n", NAMESPACE, "rollout", "status", f"deployment/{deployment}"),
            f"--timeout={WAIT}",
        )


def test_the_api_answers_through_its_service(cluster: Cluster, deployed: str) -> None:
    cluster.kubectl(
        *("-n", NAMESPACE, "rollout", "status", "deployment/envfarm-api", f"--timeout={WAIT}")
    )
    # The API server's service proxy: the Service, its endpoints and the pod's port.
    health = cluster.kubectl(
        "get",
        "--raw",
        f"/api/v1/namespaces/{NAMESPACE}/services/http:envfarm-api:8080/proxy/healthz",
    )
    assert json.loads(health) == {"status": "ok"}
    # From the operator's pod, with its URL and token: cluster DNS, the token, the database.
    script = (
        "import json, os, urllib.request as r\n"
        "url = os.environ['ENVFARM_API_URL'] + '/v1/jobs'\n"
        "auth = {'Authorization': 'Bearer ' + os.environ['ENVFARM_TOKEN']}\n"
        "print(json.dumps(json.load(r.urlopen(r.Request(url, headers=auth), timeout=30))))\n"
    )
    jobs = cluster.kubectl(
        "-n", NAMESPACE, "exec", "deployment/envfarm-operator", "--", "python3", "-c", script
    )
    assert "jobs" in json.loads(jobs)


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
