"""Harbor's network default for an unset verifier, where no engine is needed: the likely cause
``envfarm check`` names, and the Kubernetes verifier pod that gets the network."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envfarm.check.explain import network_cause
from envfarm.check.verdicts import TaskCheck
from envfarm.models.trajectory import Provenance, Reward, Trajectory
from envfarm.plan.planner import environment_spec
from envfarm.sandbox.kubernetes.podimages import cluster_images
from envfarm.sandbox.kubernetes.podspec import LABEL_NETWORK, PodOptions, environment_pod
from envfarm.sandbox.kubernetes.verifier_pod import verifier_pod
from envfarm.spec import load_task
from tests.plans import sandbox_spec

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "grading-downloads"


def oracle(value: float) -> Trajectory:
    return Trajectory(
        trajectory_id="t",
        episode_id="ep1",
        job_id="j",
        group_id="g",
        task_id="fixtures/grading-downloads",
        provenance=Provenance(task_hash="h", envfarm_version="test"),
        reward=Reward(value=value, valid=True, reason="test"),
    )


def with_toml(tmp_path: Path, extra: str) -> Path:
    root = tmp_path / "task"
    shutil.copytree(FIXTURE, root)
    toml = root / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\n", f"[verifier]\n{extra}\n"))
    return root


def test_a_missed_oracle_without_network_that_downloads_names_the_likely_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = load_task(FIXTURE)
    check = TaskCheck(task_id=task.id, path=".")
    assert network_cause(task, check, [oracle(0.0)]) == []  # the verifier had the network
    monkeypatch.setenv("ENVFARM_VERIFIER_NETWORK", "none")
    assert network_cause(task, check, [oracle(1.0)]) == []  # nothing to explain
    (cause,) = network_cause(task, check, [oracle(0.0)])
    assert cause.startswith("likely cause: the verifier had no network (ENVFARM_VERIFIER_NETWORK")
    monkeypatch.delenv("ENVFARM_VERIFIER_NETWORK")
    shared = load_task(with_toml(tmp_path, 'environment_mode = "shared"'))
    (cause,) = network_cause(shared, check, [oracle(0.0)])
    assert "a shared verifier runs in the agent's container" in cause


def test_the_kubernetes_verifier_pod_of_an_unset_task_gets_the_network_and_dns() -> None:
    task = load_task(FIXTURE)
    pod = environment_pod(
        sandbox_spec(task),
        cluster_images(environment_spec(task)),
        PodOptions(environment_id="env1", run_id="run-1"),
    )
    assert pod["metadata"]["labels"][LABEL_NETWORK] == "none"  # the agent's
    assert pod["spec"]["dnsPolicy"] == "None"
    fork = verifier_pod(pod, "env1", network=task.config.verifier_network())
    assert fork["metadata"]["labels"][LABEL_NETWORK] == "internet"
    assert "dnsPolicy" not in fork["spec"]
    assert "dnsConfig" not in fork["spec"]
    offline = verifier_pod(pod, "env1", network=False)
    assert offline["spec"]["dnsPolicy"] == "None"
