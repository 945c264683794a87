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
        result = subprocess.run(
            [self.kubectl_path, "--kubeconfig", self.kubeconfig, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
        return result.stdout + result.stderr
