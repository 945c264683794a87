"""``envfarm push`` against a real registry on loopback: every image a task's pods pull lands
under the Kubernetes backend's name, and a registry that refuses the push is a clear error."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

from envfarm.plan.planner import environment_spec
from envfarm.sandbox.kubernetes.podimages import ImageNaming, cluster_images
from envfarm.spec.task import load_task
from tests.docker.registry import loopback_registry
from tests.integration.serve_process import free_port

TASK = Path(__file__).resolve().parents[2] / "tasks" / "pg-schema-migration"


def _push(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envfarm", "push", *args],
        capture_output=True,
        text=True,
        timeout=1800,
    )


def _tags(address: str, repository: str) -> list[str]:
    with urllib.request.urlopen(f"http://{address}/v2/{repository}/tags/list") as answer:
        return list(json.load(answer)["tags"])


def test_push_puts_every_image_a_pod_pulls_in_the_registry(tmp_path: Path) -> None:
    with loopback_registry(tmp_path / "registry") as address:
        prefix = f"{address}/team"
        result = _push("--registry", prefix, str(TASK))
        assert result.returncode == 0, result.stdout + result.stderr
        names = cluster_images(environment_spec(load_task(TASK)), ImageNaming(registry=prefix))
        for name in (names.main, names.helper, *names.services.values()):
            repository, tag = name.removeprefix(f"{address}/").rsplit(":", 1)
            assert tag in _tags(address, repository), name
            assert f"pushed {name}" in result.stderr
        assert "1 task, 3 images pushed" in result.stderr


def test_a_registry_nobody_answers_is_an_error_naming_the_image() -> None:
    result = _push("--registry", f"127.0.0.1:{free_port()}/team", str(TASK))
    assert result.returncode == 1
    assert "pushing" in result.stderr
    assert "failed" in result.stderr


def test_no_registry_is_a_usage_error() -> None:
    result = _push(str(TASK))
    assert result.returncode == 2
    assert "--registry" in result.stderr
