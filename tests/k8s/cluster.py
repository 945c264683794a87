"""A cluster the suite drives: its kubeconfig, the registry its nodes pull from, a kubectl."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class Cluster:
    kubeconfig: str
    registry: str
    kubectl_path: str

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        """Runs kubectl against this cluster; its output and errors, or an AssertionError."""
        result = self._run("--kubeconfig", self.kubeconfig, *args, stdin=stdin)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
        return result.stdout + result.stderr

    def kustomize(self, directory: str) -> str:
        """``directory`` rendered by kubectl's own kustomize (no cluster involved)."""
        result = self._run("kustomize", directory)
        if result.returncode != 0:
            raise AssertionError(f"kubectl kustomize {directory} failed:\n{result.stderr}")
        return result.stdout

    def _run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.kubectl_path, *args], input=stdin, capture_output=True, text=True, timeout=600
        )
