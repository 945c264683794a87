"""The environment pod of a task (pure functions): what the Docker backend runs, as one pod.

Its containers, hardened as with Docker, are ``podcontainers``': the task image with the
in-sandbox helper as its process, one sidecar container per other compose service, and the
init containers that copy the helper and the task's files in. The pod itself carries no
service account token and no service environment variables.

* **Network**: the containers of a pod share one network namespace, so services reach each
  other on loopback; ``hostAliases`` maps every service name (and ``main``) to 127.0.0.1, so
  the names a compose file uses resolve as on Docker's per-environment network. Two services
  listening on the same port cannot share a pod. Egress is cut by the namespace's
  NetworkPolicy unless the label ``envfarm.dev/network: internet`` says the task asked for the
  network; without it, DNS points at loopback so lookups fail at once instead of timing out.
* **Lifecycle**: ``restartPolicy: Never`` (a service that exits fails the start, as with
  Docker), ``activeDeadlineSeconds`` is the environment's TTL, labels
  ``envfarm.dev/environment``, ``envfarm.dev/run`` and ``envfarm.dev/task`` find it, and an
  owner reference (a pool, a job) garbage-collects it.

Services start together (a pod has no order between containers): ``depends_on`` gates
readiness, not start, so a service that needs another must retry until it is up.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envfarm.plan.models import SandboxSpec
from envfarm.sandbox.kubernetes.podcontainers import (
    HELPER_VOLUME,
    init_containers,
    main_container,
    sidecar_container,
)
from envfarm.sandbox.kubernetes.podcontainers import MAIN_CONTAINER as MAIN_CONTAINER
from envfarm.sandbox.kubernetes.podfiles import dns_label, pod_volumes
from envfarm.sandbox.kubernetes.podimages import PodImages
from envfarm.spec.compose import MAIN_SERVICE

LABEL_ENVIRONMENT = "envfarm.dev/environment"
LABEL_RUN = "envfarm.dev/run"
LABEL_TASK = "envfarm.dev/task"
LABEL_NETWORK = "envfarm.dev/network"
ANNOTATION_TASK = "envfarm.dev/task-id"
MANAGED_BY = {"app.kubernetes.io/managed-by": "envfarm", "app.kubernetes.io/component": "sandbox"}
SERVICE_ACCOUNT = "envfarm-sandbox"
GVISOR_RUNTIME_CLASS = "gvisor"
"""The RuntimeClass of manifests/base/cluster (handler ``runsc``)."""


class PodOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    environment_id: str
    run_id: str = "adhoc"
    name: str | None = None
    """Pod name; None: ``envfarm-<environment_id>``. Empty: ``generate_name`` is used."""
    generate_name: str | None = None
    runtime_class: str | None = None
    ttl_seconds: int | None = 7200
    owner: dict[str, Any] | None = None
    """An ownerReference (``objects.owner_reference``) that garbage-collects the pod."""
    owners: list[dict[str, Any]] = Field(default_factory=list)
    """More ownerReferences (the controller's pod): the pod goes when all of them are gone."""
    run_as_user: int | None = None
    request_ratio: float | None = Field(default=None, gt=0, le=1)
    """The share of its limits the pod requests; None: the plan's (an EnvPool's own)."""
    service_account: str | None = SERVICE_ACCOUNT
    image_pull_policy: str = "IfNotPresent"
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


def label_value(text: str) -> str:
    """``text`` as a label value: at most 63 of ``[A-Za-z0-9._-]``, alphanumeric at the ends."""
    return dns_label(text) if text else ""


def environment_labels(spec: SandboxSpec, options: PodOptions) -> dict[str, str]:
    network = "internet" if spec.agent_network else "none"
    return {
        **MANAGED_BY,
        **options.labels,
        LABEL_ENVIRONMENT: label_value(options.environment_id),
        LABEL_RUN: label_value(options.run_id),
        LABEL_TASK: label_value(spec.task_id),
        LABEL_NETWORK: network,
    }


def environment_pod(spec: SandboxSpec, images: PodImages, options: PodOptions) -> dict[str, Any]:
    """The pod running one environment as ``spec`` (the plan's) says."""
    compose = spec.environment.compose
    sidecars = compose.sidecars if compose is not None else {}
    services = compose.services.values() if compose is not None else []
    names = sorted({MAIN_SERVICE, *sidecars, *(a for s in services for a in s.aliases)})
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "hostname": "sandbox",
        "hostAliases": [{"ip": "127.0.0.1", "hostnames": names}],
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 5,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "initContainers": init_containers(spec, images, pull=options.image_pull_policy),
        "containers": [
            main_container(
                spec,
                images,
                pull=options.image_pull_policy,
                request_ratio=options.request_ratio,
                run_as_user=options.run_as_user,
            ),
            *(
                sidecar_container(spec, s, images.services[n], options.image_pull_policy)
                for n, s in sidecars.items()
            ),
        ],
        "volumes": [{"name": HELPER_VOLUME, "emptyDir": {}}, *pod_volumes(spec.environment)],
    }
    # the agent's pod resolves names only when a phase it runs has a network (a fresh
    # verifier's pod gets its own, verifier_pod.py)
    shared_network = spec.verifier_mode == "shared" and spec.verifier_network
    if not (spec.agent_network or shared_network):
        pod["dnsPolicy"] = "None"
        pod["dnsConfig"] = {"nameservers": ["127.0.0.1"], "searches": [], "options": []}
    optional = {
        "runtimeClassName": options.runtime_class,
        "activeDeadlineSeconds": options.ttl_seconds,
        "serviceAccountName": options.service_account,
    }
    pod.update({key: value for key, value in optional.items() if value is not None})
    metadata: dict[str, Any] = {
        "labels": environment_labels(spec, options),
        "annotations": {**options.annotations, ANNOTATION_TASK: spec.task_id},
    }
    if options.generate_name:
        metadata["generateName"] = options.generate_name
    else:
        metadata["name"] = options.name or f"envfarm-{options.environment_id}"
    owners = [options.owner, *options.owners] if options.owner is not None else options.owners
    if owners:
        metadata["ownerReferences"] = owners
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod}
