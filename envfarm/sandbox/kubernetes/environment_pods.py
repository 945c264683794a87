"""What every environment pod of one Kubernetes backend shares, as the backend and each of its
sandboxes reach it: the API and namespace the pods live in, the one watch that sees them all
(``podwatch``), the owner they carry, and the EnvPools a warm one is claimed from.

A pod carries its owner process as labels (``envfarm.dev/owner-host`` and
``envfarm.dev/owner-process``), so the backend's ``reap`` can tell what an earlier process on
this host left behind. In a cluster the controller's own pod (``owner_pod``, from the downward
API) owns every environment pod it starts or claims (``ownerpod``): through an ownerReference
when both share a namespace, else through a label that ``reap`` checks.

A task mapped to an EnvPool (``config.pools``, else the namespace's EnvPools by their task:
``pool_directory``) starts by claiming one of the pool's ready pods that runs its environment
(one merge patch, from a watch-fed cache of the pool: ``envfarm.k8s.pools``), and cold-starts
only when none is ready.
"""

from __future__ import annotations

import os
import socket
import time
import uuid

from envfarm.k8s.api import KubeApi, KubeObject
from envfarm.k8s.pools import NoWarmEnvironment, PoolClaimer
from envfarm.plan.models import SandboxSpec
from envfarm.sandbox.kubernetes.backend_config import KubernetesBackendConfig
from envfarm.sandbox.kubernetes.podspec import LABEL_RUN, MANAGED_BY, label_value
from envfarm.sandbox.kubernetes.podwatch import PodWatch
from envfarm.sandbox.kubernetes.pool_directory import PoolDirectory, same_environment

LABEL_OWNER_HOST = "envfarm.dev/owner-host"
LABEL_OWNER_PROCESS = "envfarm.dev/owner-process"
SANDBOX_SELECTOR = ",".join(f"{key}={value}" for key, value in MANAGED_BY.items())
PROCESS = label_value(f"{os.getpid()}-{int(time.time())}-{uuid.uuid4().hex[:6]}")
"""This process, as its pods' ``envfarm.dev/owner-process`` label says it."""


class EnvironmentPods:
    """The environment pods of one backend (``config``), on ``api``."""

    def __init__(self, api: KubeApi, config: KubernetesBackendConfig) -> None:
        self.api = api
        self.config = config
        self.namespace = config.namespace
        self.watch = PodWatch(api, config.namespace, SANDBOX_SELECTOR)
        self.host = label_value(socket.gethostname())
        owner_pod = config.owner_pod
        self.owners = [config.owner] if config.owner is not None else []
        """The ownerReferences every pod gets."""
        if owner_pod is not None and owner_pod.namespace == config.namespace:
            self.owners.append(owner_pod.reference())
        self.owner_labels = {LABEL_OWNER_HOST: self.host, LABEL_OWNER_PROCESS: PROCESS}
        self.owner_annotations: dict[str, str] = {}
        if owner_pod is not None:
            self.owner_labels |= owner_pod.labels()
            self.owner_annotations = owner_pod.annotations()
        self._claimers: dict[str, PoolClaimer] = {}
        self.directory = PoolDirectory(api, config.namespace) if config.discover_pools else None

    async def claim(
        self, spec: SandboxSpec, pod: KubeObject, run_id: str, claimer: str
    ) -> KubeObject | None:
        """A warm pod of the task's pool running what ``pod`` would, claimed for this run;
        None without one."""
        pool = self.config.pools.get(spec.task_id)
        if pool is None and self.directory is not None:
            pool = await self.directory.pool_for(spec.task_id)
        if pool is None:
            return None
        claimer_of_pool = self._claimers.get(pool)
        if claimer_of_pool is None:
            claimer_of_pool = self._claimers[pool] = PoolClaimer(self.api, self.namespace, pool)
            await claimer_of_pool.start()
        labels = {LABEL_RUN: label_value(run_id), **self.owner_labels}
        try:
            return await claimer_of_pool.claim(
                label_value(claimer),
                owners=self.owners,
                labels=labels,
                annotations=self.owner_annotations,
                accept=lambda warm: same_environment(warm, pod),
            )
        except NoWarmEnvironment:
            return None

    async def close(self) -> None:
        await self.watch.close()
        if self.directory is not None:
            await self.directory.close()
        for claimer in self._claimers.values():
            await claimer.close()
