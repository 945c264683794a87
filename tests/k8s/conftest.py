"""The real-cluster suite. It runs against the cluster ``ENVFARM_TEST_KUBECONFIG`` names and pushes
envfarm's images to ``ENVFARM_TEST_IMAGE_REGISTRY``, a registry that cluster's nodes pull from
(plain HTTP allowed). Without ``ENVFARM_TEST_KUBECONFIG`` it brings up the project's own
one-node cluster for the session (``scripts/k8s-cluster up``, from the binaries that
``scripts/setup --tests`` built) and takes it down afterwards; a cluster that was already up,
or ``ENVFARM_K8S_KEEP=1``, is left up. The user's ``KUBECONFIG`` is never read: test workloads
go only where the test variables say. Like the Docker tests, these fail rather than skip when
there is no cluster."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.k8s.cluster import CLUSTER_SCRIPT, Cluster, as_root

REPO = Path(__file__).resolve().parents[2]


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        as_root(str(CLUSTER_SCRIPT), *args), capture_output=True, text=True, timeout=1800
    )


def _script_env() -> dict[str, str]:
    result = _script("env")
    if result.returncode != 0:
        pytest.fail(f"scripts/k8s-cluster env failed:\n{result.stderr}")
    return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    kubeconfig = os.environ.get("ENVFARM_TEST_KUBECONFIG")
    if kubeconfig:
        registry = os.environ.get("ENVFARM_TEST_IMAGE_REGISTRY", "")
        if not registry:
            pytest.fail(
                "ENVFARM_TEST_KUBECONFIG is set without ENVFARM_TEST_IMAGE_REGISTRY: name a "
                "registry that cluster's nodes pull from, which the tests push envfarm's images to"
            )
        kubectl = os.environ.get("ENVFARM_TEST_KUBECTL") or shutil.which("kubectl")
        if kubectl is None:
            pytest.fail("kubectl is not on PATH (or ENVFARM_TEST_KUBECTL): tests/k8s drives it")
        yield Cluster(kubeconfig, registry, kubectl)
        return
    found = _script_env()
    kubectl = str(Path(found["ENVFARM_K8S_BIN"]) / "kubectl")
    if not Path(kubectl).exists():
        pytest.fail(
            "the project's cluster is not built: run scripts/setup --tests (it builds Kubernetes "
            "from the Go module proxy, ~20 minutes once), or set ENVFARM_TEST_KUBECONFIG"
        )
    was_up = _script("status").returncode == 0
    started = _script("up")
    if started.returncode != 0:
        pytest.fail(f"scripts/k8s-cluster up failed:\n{started.stderr[-4000:]}")
    os.environ["ENVFARM_TEST_KUBECONFIG"] = found["ENVFARM_TEST_KUBECONFIG"]
    os.environ["ENVFARM_TEST_IMAGE_REGISTRY"] = found["ENVFARM_TEST_IMAGE_REGISTRY"]
    try:
        yield Cluster(
            found["ENVFARM_TEST_KUBECONFIG"],
            found["ENVFARM_TEST_IMAGE_REGISTRY"],
            kubectl,
            managed=True,
        )
    finally:
        if not was_up and os.environ.get("ENVFARM_K8S_KEEP") != "1":
            stopped = _script("down")
            assert stopped.returncode == 0, f"scripts/k8s-cluster down failed:\n{stopped.stderr}"


def _run(*command: str, stdin: bytes | None = None) -> str:
    result = subprocess.run(command, input=stdin, capture_output=True, timeout=1800)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed:\n{result.stderr.decode()[-4000:]}")
    return result.stdout.decode()


@pytest.fixture(scope="session")
def envfarm_image(cluster: Cluster) -> str:
    """The envfarm image (manifests/image/Dockerfile) of the working tree's tracked files, on
    envfarm's own Python image, pushed to the test registry under a tag of its content."""
    from envfarm.sandbox.docker.images.task_images import ensure_recipe_image

    base = asyncio.run(ensure_recipe_image("python-slim")).tag
    files = _run("git", "-C", str(REPO), "ls-files", "-z")
    context = subprocess.run(
        ["tar", "-C", str(REPO), "--null", "-T", "-", "--ignore-failed-read", "-cf", "-"],
        input=files.encode(),
        capture_output=True,
        check=True,
    ).stdout
    local = "envfarm:dev"
    _run(
        *("docker", "build", "-q", "-f", "manifests/image/Dockerfile"),
        *("--build-arg", f"BASE={base}", "-t", local, "-"),
        stdin=context,
    )
    image_id = _run("docker", "image", "inspect", "-f", "{{.Id}}", local).strip()
    remote = f"{cluster.registry}/envfarm:dev-{image_id.removeprefix('sha256:')[:12]}"
    _run("docker", "tag", local, remote)
    _run("docker", "push", "-q", remote)
    _run("docker", "rmi", remote)  # the name only: the image stays as envfarm:dev
    return remote
