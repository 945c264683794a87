"""envfarm's manifests as ``kubectl kustomize`` renders them (no cluster involved), and the pods
they and the pod builder make, for the unit tests and the real-cluster suite alike.

The kubectl is ``ENVFARM_TEST_KUBECTL`` when set, else the one ``scripts/setup --tests`` built
(``scripts/k8s-build --dir``), else the one on ``PATH``. Without any, the tests fail rather than
skip: CI always runs ``scripts/setup --tests`` first."""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from envfarm.plan.planner import environment_spec
from envfarm.sandbox.kubernetes.podimages import cluster_images
from envfarm.sandbox.kubernetes.podspec import PodOptions, environment_pod
from envfarm.spec.task import load_task
from tests.plans import sandbox_spec

REPO = Path(__file__).resolve().parents[1]
MANIFESTS = REPO / "manifests"
TEMPLATE_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"})

Resource = dict[str, Any]


@cache
def kubectl() -> str:
    """The path of the kubectl the tests render with."""
    explicit = os.environ.get("ENVFARM_TEST_KUBECTL")
    if explicit:
        if not os.access(explicit, os.X_OK):
            pytest.fail(f"ENVFARM_TEST_KUBECTL={explicit} is not an executable kubectl")
        return explicit
    built = subprocess.run(
        [str(REPO / "scripts" / "k8s-build"), "--dir"], capture_output=True, text=True
    )
    if built.returncode == 0 and os.access(Path(built.stdout.strip()) / "kubectl", os.X_OK):
        return str(Path(built.stdout.strip()) / "kubectl")
    on_path = shutil.which("kubectl")
    if on_path is None:
        pytest.fail(
            "no kubectl to render the manifests with: run scripts/setup --tests (it builds one), "
            "or set ENVFARM_TEST_KUBECTL, or put kubectl on PATH"
        )
    return on_path


def kustomize(directory: Path) -> list[Resource]:
    """The objects ``kubectl kustomize DIRECTORY`` prints, in its order."""
    result = subprocess.run(
        [kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=120
    )
    if result.returncode != 0:
        pytest.fail(f"kubectl kustomize {directory} failed:\n{result.stderr}")
    return [document for document in yaml.safe_load_all(result.stdout) if document]


def pod_spec_of(resource: Resource) -> dict[str, Any] | None:
    """The pod spec a workload object creates pods from (None for other kinds)."""
    spec = resource.get("spec") or {}
    if resource["kind"] == "Pod":
        return dict(spec)
    if resource["kind"] in TEMPLATE_KINDS:
        return dict(spec["template"]["spec"])
    if resource["kind"] == "CronJob":
        return dict(spec["jobTemplate"]["spec"]["template"]["spec"])
    return None


def environment_pods(runtime_class: str = "gvisor") -> list[Resource]:
    """The pod builder's pod for every example task (``tasks/*``), each named after its task."""
    tasks = REPO / "tasks"
    pods = []
    for directory in sorted(p for p in tasks.iterdir() if (p / "task.toml").is_file()):
        task = load_task(directory)
        options = PodOptions(
            environment_id=directory.name, name=f"env-{directory.name}", runtime_class=runtime_class
        )
        pod = environment_pod(sandbox_spec(task), cluster_images(environment_spec(task)), options)
        pods.append({"apiVersion": "v1", "kind": "Pod", **pod})
    return pods
