"""Which EnvPool serves a task: the namespace's EnvPools, watched, by ``spec.taskRef.name``.

A controller need not be told its pools: an episode of a task that an EnvPool in its namespace
serves claims a warm environment from it first. A pool is trusted only for pods that are the
environment the episode would start itself (``same_environment``: the same images in the same
places and the same runtime class), so a pool still rendering an older version of the task, or
another library's, is passed over for a cold start rather than run.

Where EnvPools cannot be read (their CRD is not installed, or RBAC does not grant it) the
directory says so once in the log and every episode starts cold.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from envfarm.k8s.api import ENV_POOLS, KubeApi, KubeObject
from envfarm.k8s.informer import Informer

SYNC_WAIT_S = 5.0
log = logging.getLogger(__name__)


class PoolDirectory:
    def __init__(self, api: KubeApi, namespace: str) -> None:
        self.informer = Informer(api, ENV_POOLS, namespace, retry_s=30.0)
        self._unavailable = False

    async def pool_for(self, task_id: str) -> str | None:
        """The name of an EnvPool serving ``task_id`` (the first by name), or None."""
        if self._unavailable:
            return None
        if not self.informer.synced.is_set():
            self.informer.start()
            try:
                await asyncio.wait_for(self.informer.synced.wait(), SYNC_WAIT_S)
            except TimeoutError:
                self._unavailable = True
                log.warning(
                    "EnvPools cannot be read (%s): episodes start cold",
                    self.informer.last_error or "no answer",
                )
                await self.informer.stop()
                return None
        serving = sorted(
            pool["metadata"]["name"]
            for pool in self.informer.cache.values()
            if ((pool.get("spec") or {}).get("taskRef") or {}).get("name") == task_id
            and not pool["metadata"].get("deletionTimestamp")
        )
        return serving[0] if serving else None

    async def close(self) -> None:
        await self.informer.stop()


def _images(pod: KubeObject) -> list[tuple[str, str]]:
    spec: dict[str, Any] = pod.get("spec") or {}
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    return sorted((c.get("name", ""), c.get("image", "")) for c in containers)


def same_environment(pod: KubeObject, wanted: KubeObject) -> bool:
    """Whether a warm ``pod`` runs what ``wanted`` (the pod the episode would create) runs."""
    spec, wanted_spec = pod.get("spec") or {}, wanted.get("spec") or {}
    return _images(pod) == _images(wanted) and spec.get("runtimeClassName") == wanted_spec.get(
        "runtimeClassName"
    )
