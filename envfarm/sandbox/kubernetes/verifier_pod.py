"""A clean-room verifier on Kubernetes (``KubernetesSandbox.fresh_verifier``): a second pod.

A single-container environment gets its fresh verifier by deleting the agent's pod and creating
another from the same pod spec: same image, limits, hardening, runtime class, TTL, labels and
owners, under a new name (``<agent pod>-verifier``) and with the verifier phase's
``envfarm.dev/network`` label, so the NetworkPolicy gives it the verifier's network from its
first packet.

An environment with sidecars is refused, before any episode runs (``check_task``, from the
backend's ``prepare``): its services run in the agent's pod, a running pod's containers cannot
be replaced, and a fresh pod would start fresh services, losing the database the agent
migrated. The alternative, a second idle copy of the main container reserved in every pod for
the verifier, would double the main container's CPU, memory and storage requests (requests
equal limits) for the whole episode of every compose task, to be used for a few minutes of
grading, or run the tests under other limits than the agent's. Such tasks are graded with
``[verifier] environment_mode = "shared"`` on Kubernetes.
"""

from __future__ import annotations

import copy

from envfarm.errors import EnvironmentUnsupported
from envfarm.k8s.api import KubeObject
from envfarm.plan.models import SandboxSpec
from envfarm.sandbox.kubernetes.podspec import LABEL_NETWORK, label_value

FORK_SUFFIX = "-verifier"
LABEL_VERIFIER_OF = "envfarm.dev/verifier-of"


def check_task(spec: SandboxSpec) -> None:
    """Refuse a task whose verifier needs a fresh container next to running sidecars."""
    mode = spec.verifier_mode
    sidecars = (
        sorted(spec.environment.compose.sidecars) if spec.environment.compose is not None else []
    )
    if mode == "shared" or not sidecars:
        return
    raise EnvironmentUnsupported(
        f"task {spec.task_id}: [verifier] environment_mode = {mode!r} needs a fresh main container "
        f"next to the running services ({', '.join(sidecars)}), and on Kubernetes the services "
        "share the agent's pod, whose containers cannot be replaced; set [verifier] "
        'environment_mode = "shared" in task.toml to grade this task on Kubernetes'
    )


def verifier_pod(pod: KubeObject, name: str, *, network: bool) -> KubeObject:
    """The verifier's pod: ``pod`` (the agent's spec) renamed, with ``network``."""
    pod_copy = copy.deepcopy(pod)
    metadata = pod_copy["metadata"]
    for key in ("generateName", "uid", "resourceVersion", "creationTimestamp"):
        metadata.pop(key, None)
    metadata["name"] = f"{name}{FORK_SUFFIX}"
    label = "internet" if network else "none"
    metadata["labels"] = {**metadata.get("labels", {}), LABEL_NETWORK: label}
    metadata["labels"][LABEL_VERIFIER_OF] = label_value(name)
    pod_copy.pop("status", None)
    if network:  # the agent's pod may resolve names nowhere (podspec); this one may
        pod_copy["spec"].pop("dnsPolicy", None)
        pod_copy["spec"].pop("dnsConfig", None)
    return pod_copy
