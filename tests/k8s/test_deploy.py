"""Deploy the dev overlay on a real cluster: the operator becomes Available, the API server
admits the example resources and enforces the CRDs' validation rules (CEL included, which no
offline check evaluates). Everything applied is deleted afterwards unless ENVFARM_K8S_KEEP=1."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from envfarm.testing.k8s.kustomize import render_yaml

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
NAMESPACE, SANDBOXES = "envfarm-system", "envfarm-sandboxes"
WAIT = "300s"


def kubectl(*args: str, stdin: str | None = None, check: bool = True) -> str:
    result = subprocess.run(
        ["kubectl", *args], input=stdin, capture_output=True, text=True, timeout=600
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def deployed() -> Iterator[str]:
    manifests = render_yaml(MANIFESTS / "overlays/dev")
    kubectl("apply", "--server-side", "--field-manager=envfarm-tests", "-f", "-", stdin=manifests)
    yield manifests
    if os.environ.get("ENVFARM_K8S_KEEP") != "1":
        kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=manifests)


def test_the_operator_becomes_available(deployed: str) -> None:
    kubectl(
        "-n",
        NAMESPACE,
        "wait",
        "--for=condition=Available",
        "deployment/envfarm-operator",
        f"--timeout={WAIT}",
    )


def test_the_example_resources_are_admitted(deployed: str) -> None:
    for crd in ("rolloutjobs.envfarm.dev", "envpools.envfarm.dev"):
        kubectl("wait", "--for=condition=Established", f"crd/{crd}", f"--timeout={WAIT}")
    for example in ("rolloutjob.yaml", "envpool.yaml", "environment-network-policy.yaml"):
        kubectl("apply", "--dry-run=server", "-f", str(MANIFESTS / "examples" / example))


def test_the_api_server_enforces_the_crd_rules(deployed: str) -> None:
    job = next(yaml.safe_load_all((MANIFESTS / "examples/rolloutjob.yaml").read_text()))
    job["spec"]["tasks"]["configMap"] = {"name": "also-a-configmap"}  # two sources: CEL rule
    output = kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(job), check=False)
    assert "exactly one of configMap, volumeClaim and image" in output
    job["spec"]["tasks"].pop("configMap")
    job["spec"]["groupsize"] = 8  # strict field validation rejects unknown fields
    output = kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(job), check=False)
    assert "groupsize" in output


def test_the_envpool_scale_subresource_answers(deployed: str) -> None:
    pool = next(yaml.safe_load_all((MANIFESTS / "examples/envpool.yaml").read_text()))
    pool["metadata"]["name"] = "envfarm-tests-scale"
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump(pool))
    try:
        kubectl("-n", SANDBOXES, "scale", "envpool/envfarm-tests-scale", "--replicas=0")
        replicas = kubectl(
            "-n", SANDBOXES, "get", "envpool/envfarm-tests-scale", "-o", "jsonpath={.spec.replicas}"
        )
        assert replicas.strip() == "0"
    finally:
        kubectl("-n", SANDBOXES, "delete", "envpool/envfarm-tests-scale", "--ignore-not-found")
