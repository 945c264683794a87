"""A cluster the suite drives: its kubeconfig, the registry its nodes pull from, a kubectl."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

CLUSTER_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "k8s-cluster"


def as_root(*command: str) -> list[str]:
    return list(command) if os.geteuid() == 0 else ["sudo", "-n", *command]


@dataclass(frozen=True)
class Cluster:
    kubeconfig: str
    registry: str
    kubectl_path: str
    managed: bool = False
    """The project's own cluster (``scripts/k8s-cluster``), whose daemons a test may restart."""

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        """Runs kubectl against this cluster; its output and errors, or an AssertionError."""
        result = self._run("--kubeconfig", self.kubeconfig, *args, stdin=stdin)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
        return result.stdout + result.stderr

    def restart(self, daemon: str) -> None:
        """Stop one of the cluster's daemons and bring the cluster up again."""
        assert self.managed, "only the project's own cluster is restarted by the tests"
        result = subprocess.run(
            as_root(str(CLUSTER_SCRIPT), "restart", daemon),
            capture_output=True,
            text=True,
            timeout=600,
        )
        if result.returncode != 0:
            raise AssertionError(f"restarting {daemon} failed:\n{result.stderr[-4000:]}")

    def log_tail(self, daemon: str, chars: int = 3000) -> str:
        """The end of a daemon's log, for the project's own cluster (whose logs are beside its
        kubeconfig); empty for another cluster."""
        log = Path(self.kubeconfig).parent / "log" / f"{daemon}.log"
        if not self.managed or not log.exists():
            return ""
        return log.read_text(errors="replace")[-chars:]

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
