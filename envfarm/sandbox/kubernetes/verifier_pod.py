"""A clean-room verifier on Kubernetes (``KubernetesSandbox.fresh_verifier``).

A single-container environment gets its fresh verifier by deleting the agent's pod and creating
another from the same pod spec: same image, limits, hardening, runtime class, TTL, labels and
owners, under a new name (``<agent pod>-verifier``) and with the verifier phase's
``envfarm.dev/network`` label, so the NetworkPolicy gives it the verifier's network from its
first packet.

An environment with sidecars cannot lose its pod: its services run there, and a fresh pod would
start fresh services, losing the database the agent migrated. Its verifier is an *ephemeral
container* added to the running pod (``verifier_container``): the task image's fresh file
system, the same helper, environment, working directory, volumes and hardening as the main
container, on the pod's network, so the services answer at the same names. The agent's
processes are killed first (the helper's sweep; the helper stays, taking no more commands)
and the pod is switched to the verifier's network (its label) before the container is added.
The container cannot be removed, and needs none: it ends with the pod. Kubernetes gives an
ephemeral container no resources of its own; it runs inside the pod's cgroup, whose limits are
the sum of the pod's containers' (the swept main container's share among them), so the
verifier is bounded as the agent was. The one thing a cluster must allow is the
``pods/ephemeralcontainers`` subresource (``patch``, granted in manifests/base/sandboxes).
"""

from __future__ import annotations

import copy
from typing import Any

from envfarm.errors import TaskConfigError
from envfarm.k8s.api import KubeObject
from envfarm.sandbox.base import VerifierImage
from envfarm.sandbox.kubernetes.podcontainers import MAIN_CONTAINER
from envfarm.sandbox.kubernetes.podspec import LABEL_NETWORK, label_value

FORK_SUFFIX = "-verifier"
LABEL_VERIFIER_OF = "envfarm.dev/verifier-of"
VERIFIER_CONTAINER = "envfarm-verifier"
_NOT_EPHEMERAL = ("resources", "readinessProbe", "livenessProbe", "startupProbe", "ports")


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


def verifier_container(pod: KubeObject) -> dict[str, Any]:
    """The ephemeral container that verifies next to ``pod``'s running services: its main
    container's spec, less what an ephemeral container may not have."""
    main = next(c for c in pod["spec"]["containers"] if c["name"] == MAIN_CONTAINER)
    container = {k: v for k, v in copy.deepcopy(main).items() if k not in _NOT_EPHEMERAL}
    container["name"] = VERIFIER_CONTAINER
    return container


def refuse_own_image(image: VerifierImage | None) -> None:
    """A verifier image of its own is refused here: the pods' images come from envfarm's
    registry, which builds none from a task's ``tests/``."""
    if image is not None:
        raise TaskConfigError(
            f"task {image.task_id}: a verifier image of its own ([verifier.environment], or "
            "a Dockerfile in tests/ in separate mode) is not supported on Kubernetes; run "
            "the task on the Docker backend"
        )
