"""The real-cluster suite: it runs against the cluster KUBECONFIG points at, and is skipped,
with the reason shown in the summary, everywhere else."""

from __future__ import annotations

import os
import shutil

import pytest

SKIP_REASON = (
    "KUBECONFIG is not set: tests/k8s needs a real Kubernetes cluster "
    "(e.g. kind, with the image loaded: kind load docker-image envfarm:dev)"
)


@pytest.fixture(scope="session", autouse=True)
def _needs_a_cluster() -> None:
    if not os.environ.get("KUBECONFIG"):
        pytest.skip(SKIP_REASON)
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not on PATH: tests/k8s drives the cluster with it")
