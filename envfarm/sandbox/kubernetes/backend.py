"""Kubernetes as a ``SandboxBackend``: one pod per environment, over any ``KubeApi``.

``prepare`` names the task's images (``podimages``; building and pushing them is done ahead,
by ``envfarm push``: no image is built on a cluster). ``create`` builds
the pod (``podspec``) with this backend's namespace, runtime class (gVisor's for a task that
asks for it), TTL and owner, and hands it to a ``KubernetesSandbox``, which claims a warm pod
from an EnvPool or creates this one. What the backend and its sandboxes share (the API and
namespace, the one pod watch per backend, never a poller per pod, the owner labels and the
pools' claimers) is ``environment_pods``.

``reap`` deletes the environment pods nobody will use again: those that ended (a pod that
outlived its TTL stays as Failed until deleted), those an earlier process on this host
started (its process label differs) and those of controller pods that no longer exist.
``activeDeadlineSeconds`` bounds everything else: a pod left by a controller that died
elsewhere ends within its TTL and is reaped then.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

from envfarm.errors import KubeError, KubeNotFound, SandboxError
from envfarm.k8s.api import PODS, KubeApi
from envfarm.plan.models import EngineFacts, SandboxSpec
from envfarm.sandbox.base import PreparedImage, Sandbox, SandboxBackend
from envfarm.sandbox.kubernetes.backend_config import (
    KubernetesBackendConfig as KubernetesBackendConfig,
)
from envfarm.sandbox.kubernetes.environment_pods import (
    LABEL_OWNER_HOST,
    LABEL_OWNER_PROCESS,
    PROCESS,
    SANDBOX_SELECTOR,
    EnvironmentPods,
)
from envfarm.sandbox.kubernetes.ownerpod import LABEL_OWNER_POD_UID, departed_owners
from envfarm.sandbox.kubernetes.podimages import PodImages, cluster_images
from envfarm.sandbox.kubernetes.podspec import PodOptions, environment_pod
from envfarm.sandbox.kubernetes.sandbox import KubernetesSandbox

KUBERNETES_NO_FORK = (
    "the Kubernetes backend has no snapshot of a pod's file systems to start copies from "
    "(each environment pod starts cold)"
)


class KubernetesBackend(SandboxBackend):
    name = "kubernetes"

    def __init__(self, api: KubeApi, config: KubernetesBackendConfig | None = None) -> None:
        self.api = api
        self.config = config or KubernetesBackendConfig()
        self.environment_pods = EnvironmentPods(api, self.config)
        self.pods = self.environment_pods.watch
        self.host = self.environment_pods.host
        self._images: dict[tuple[str, str], PodImages] = {}

    async def facts(self) -> EngineFacts:
        return EngineFacts(
            backend="Kubernetes cluster",
            gvisor_runtime=self.config.gvisor_runtime_class,
            fork_unsupported=KUBERNETES_NO_FORK,
        )

    def images(self, spec: SandboxSpec) -> PodImages:
        key = (str(spec.environment.root), spec.environment.task_hash)
        if key not in self._images:
            self._images[key] = cluster_images(spec.environment, self.config.images)
        return self._images[key]

    async def prepare(self, spec: SandboxSpec) -> PreparedImage:
        images = self.images(spec)
        return PreparedImage(tag=images.main, cached=True, warnings=images.warnings)

    def runtime_class(self, spec: SandboxSpec) -> str | None:
        """The plan's runtime: a RuntimeClass (gVisor's for a task that asks for it)."""
        return spec.runtime

    def ttl_seconds(self, spec: SandboxSpec) -> int:
        if self.config.ttl_seconds is not None:
            return self.config.ttl_seconds
        return int(spec.agent_timeout_s + spec.verifier_timeout_s + self.config.ttl_slack_s)

    def pod_options(self, spec: SandboxSpec, run_id: str, **overrides: Any) -> PodOptions:
        config = self.config
        options: dict[str, Any] = {
            "environment_id": uuid.uuid4().hex[:12],
            "run_id": run_id,
            "runtime_class": self.runtime_class(spec),
            "ttl_seconds": self.ttl_seconds(spec),
            "owners": self.environment_pods.owners,
            "run_as_user": config.run_as_user,
            "labels": self.environment_pods.owner_labels,
            "annotations": self.environment_pods.owner_annotations,
        }
        return PodOptions(**(options | overrides))

    def create(self, spec: SandboxSpec, image: PreparedImage, *, run_id: str) -> Sandbox:
        pod = environment_pod(spec, self.images(spec), self.pod_options(spec, run_id))
        return KubernetesSandbox(self.environment_pods, spec, pod, run_id)

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
            ) not in (None, PROCESS)
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
        await self.environment_pods.close()
