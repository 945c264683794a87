"""Kubernetes as a ``SandboxBackend``: one pod per environment, over any ``KubeApi``.

A task mapped to an EnvPool (``pools``) starts by claiming one of the pool's ready pods (one
merge patch, from a watch-fed cache of the pool), and cold-starts only when none is ready.
``prepare`` names the task's images (``podimages``; building and pushing them is done ahead,
no image is built on a cluster); it first refuses, with ``EnvironmentUnsupported``, a task
graded in a fresh container whose environment has sidecars (``podfork``). ``create`` builds
the pod (``podspec``) with this backend's namespace, runtime class (gVisor's for a task that
asks for it), TTL and owner, labelled with the run and with the owner process
(``envfarm.dev/owner-host`` and ``envfarm.dev/owner-process``). Readiness comes from one pod
watch per backend (``podwatch``), never a poller per pod.

In a cluster the controller's own pod (``owner_pod``, from the downward API) owns every
environment pod it starts or claims (``ownerpod``): through an ownerReference when both share
a namespace, else through a label that ``reap`` checks.

``reap`` deletes the environment pods nobody will use again: those that ended (a pod that
outlived its TTL stays as Failed until deleted), those an earlier process on this host
started (its process label differs) and those of controller pods that no longer exist.
``activeDeadlineSeconds`` bounds everything else: a pod left by a controller that died
elsewhere ends within its TTL and is reaped then.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from envfarm.errors import KubeError, KubeNotFound, SandboxError
from envfarm.k8s.api import PODS, KubeApi, KubeObject
from envfarm.k8s.pools import NoWarmEnvironment, PoolClaimer
from envfarm.plan.models import EngineFacts, SandboxSpec
from envfarm.sandbox.base import PreparedImage, Sandbox, SandboxBackend
from envfarm.sandbox.health import HealthPolicy
from envfarm.sandbox.kubernetes.ownerpod import LABEL_OWNER_POD_UID, OwnerPod, departed_owners
from envfarm.sandbox.kubernetes.podfork import check_task
from envfarm.sandbox.kubernetes.podimages import ImageNaming, PodImages, cluster_images
from envfarm.sandbox.kubernetes.podspec import (
    GVISOR_RUNTIME_CLASS,
    LABEL_RUN,
    MANAGED_BY,
    PodOptions,
    environment_pod,
    label_value,
)
from envfarm.sandbox.kubernetes.podwatch import PodWatch
from envfarm.sandbox.kubernetes.sandbox import KubernetesSandbox

LABEL_OWNER_HOST = "envfarm.dev/owner-host"
LABEL_OWNER_PROCESS = "envfarm.dev/owner-process"
SANDBOX_SELECTOR = ",".join(f"{key}={value}" for key, value in MANAGED_BY.items())
_PROCESS = label_value(f"{os.getpid()}-{int(time.time())}-{uuid.uuid4().hex[:6]}")


class KubernetesBackendConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    namespace: str = "envfarm-sandboxes"
    images: ImageNaming = Field(default_factory=ImageNaming)
    gvisor_runtime_class: str = GVISOR_RUNTIME_CLASS
    """The RuntimeClass of a task whose ``[environment] runtime`` is ``gvisor``."""
    ttl_seconds: int | None = None
    """Environment lifetime; None: the task's agent and verifier timeouts plus ``ttl_slack_s``."""
    ttl_slack_s: int = 1800
    start_timeout_s: float = 900.0
    """Scheduling and image pulls, on top of the services' healthcheck budget."""
    cpu_request_ratio: float = Field(default=1.0, gt=0, le=1)
    run_as_user: int | None = None
    owner: dict[str, Any] | None = None
    """An ownerReference for every pod (a RolloutJob, say): deleting it removes them."""
    owner_pod: OwnerPod | None = None
    """The controller's own pod: deleting it removes the environments it started."""
    channel: Literal["attach", "exec"] = "attach"
    output_cap: int = 4 * 1024 * 1024
    pools: dict[str, str] = Field(default_factory=dict)
    """Task id -> EnvPool to claim a warm environment from (a cold start when none is ready)."""


class KubernetesBackend(SandboxBackend):
    name = "kubernetes"

    def __init__(self, api: KubeApi, config: KubernetesBackendConfig | None = None) -> None:
        self.api = api
        self.config = config or KubernetesBackendConfig()
        self.pods = PodWatch(api, self.config.namespace, SANDBOX_SELECTOR)
        self._images: dict[tuple[str, str], PodImages] = {}
        self._claimers: dict[str, PoolClaimer] = {}
        self.host = label_value(socket.gethostname())
        owner_pod = self.config.owner_pod
        self.owners = [self.config.owner] if self.config.owner is not None else []
        if owner_pod is not None and owner_pod.namespace == self.config.namespace:
            self.owners.append(owner_pod.reference())
        self.owner_labels = {LABEL_OWNER_HOST: self.host, LABEL_OWNER_PROCESS: _PROCESS}
        self.owner_annotations: dict[str, str] = {}
        if owner_pod is not None:
            self.owner_labels |= owner_pod.labels()
            self.owner_annotations = owner_pod.annotations()

    async def facts(self) -> EngineFacts:
        return EngineFacts(
            backend="Kubernetes cluster", gvisor_runtime=self.config.gvisor_runtime_class
        )

    def images(self, spec: SandboxSpec) -> PodImages:
        key = (str(spec.environment.root), spec.environment.task_hash)
        if key not in self._images:
            self._images[key] = cluster_images(spec.environment, self.config.images)
        return self._images[key]

    async def prepare(self, spec: SandboxSpec) -> PreparedImage:
        check_task(spec)
        images = self.images(spec)
        return PreparedImage(tag=images.main, cached=True, warnings=images.warnings)

    def runtime_class(self, spec: SandboxSpec) -> str | None:
        """The plan's runtime: a RuntimeClass (gVisor's for a task that asks for it)."""
        return spec.runtime

    def ttl_seconds(self, spec: SandboxSpec) -> int:
        if self.config.ttl_seconds is not None:
            return self.config.ttl_seconds
        return int(spec.agent_timeout_s + spec.verifier_timeout_s + self.config.ttl_slack_s)

    def health_budget_s(self, spec: SandboxSpec) -> float:
        """The Docker backend's budget: the slowest service's start_period + retries x
        (interval + timeout), and the main container's healthcheck."""
        budgets = [0.0]
        checks = (
            [s.healthcheck for s in spec.environment.compose.services.values()]
            if spec.environment.compose
            else []
        )
        for check in checks:
            if check is not None and check.argv() is not None:
                policy = HealthPolicy(
                    interval_s=check.interval,
                    timeout_s=check.timeout,
                    retries=check.retries,
                    start_period_s=check.start_period,
                )
                budgets.append(policy.budget_s())
        if (main := spec.environment.config.healthcheck) is not None:
            policy = HealthPolicy(
                interval_s=main.interval_sec,
                timeout_s=main.timeout_sec,
                retries=main.retries,
                start_period_s=main.start_period_sec,
            )
            budgets.append(policy.budget_s())
        return max(budgets)

    def pod_options(self, spec: SandboxSpec, run_id: str, **overrides: Any) -> PodOptions:
        config = self.config
        options: dict[str, Any] = {
            "environment_id": uuid.uuid4().hex[:12],
            "run_id": run_id,
            "runtime_class": self.runtime_class(spec),
            "ttl_seconds": self.ttl_seconds(spec),
            "owners": self.owners,
            "run_as_user": config.run_as_user,
            "cpu_request_ratio": config.cpu_request_ratio,
            "labels": self.owner_labels,
            "annotations": self.owner_annotations,
        }
        return PodOptions(**(options | overrides))

    async def claim(self, spec: SandboxSpec, run_id: str, claimer: str) -> KubeObject | None:
        """A warm pod of the task's pool, claimed for this run; None without one."""
        pool = self.config.pools.get(spec.task_id)
        if pool is None:
            return None
        claimer_of_pool = self._claimers.get(pool)
        if claimer_of_pool is None:
            claimer_of_pool = self._claimers[pool] = PoolClaimer(
                self.api, self.config.namespace, pool
            )
            await claimer_of_pool.start()
        labels = {LABEL_RUN: label_value(run_id), **self.owner_labels}
        try:
            return await claimer_of_pool.claim(
                label_value(claimer),
                owners=self.owners,
                labels=labels,
                annotations=self.owner_annotations,
            )
        except NoWarmEnvironment:
            return None

    def create(self, spec: SandboxSpec, image: PreparedImage, *, run_id: str) -> Sandbox:
        pod = environment_pod(spec, self.images(spec), self.pod_options(spec, run_id))
        return KubernetesSandbox(self, spec, pod, run_id)

    async def reap(self) -> list[str]:
        try:
            listing = await self.api.list(
                PODS, self.config.namespace, label_selector=SANDBOX_SELECTOR
            )
        except KubeError as exc:
            raise SandboxError(f"could not list environment pods to reap: {exc}") from exc
        departed = await departed_owners(self.api, listing.items, self.config.owner_pod)
        doomed = []
        for pod in listing.items:
            labels = pod["metadata"].get("labels") or {}
            ended = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            earlier = labels.get(LABEL_OWNER_HOST) == self.host and labels.get(
                LABEL_OWNER_PROCESS
            ) not in (None, _PROCESS)
            orphaned = labels.get(LABEL_OWNER_POD_UID) in departed
            if (ended or earlier or orphaned) and not pod["metadata"].get("deletionTimestamp"):
                doomed.append(pod["metadata"]["name"])

        async def delete(name: str) -> None:
            with contextlib.suppress(KubeNotFound):
                await self.api.delete(PODS, self.config.namespace, name)

        results = await asyncio.gather(*(delete(n) for n in doomed), return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise SandboxError(f"could not reap {len(failures)} environment pods: {failures[0]}")
        return doomed

    async def close(self) -> None:
        await self.pods.close()
        for claimer in self._claimers.values():
            await claimer.close()
