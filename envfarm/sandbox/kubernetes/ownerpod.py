"""The controller's own pod as the owner of the environment pods it starts.

In a cluster, ``envfarm serve`` and ``envfarm worker`` learn their pod from the downward API
(``ENVFARM_POD_NAME``, ``ENVFARM_POD_UID``, ``ENVFARM_POD_NAMESPACE``). When that pod is in
the environments' namespace, every environment pod gets an ownerReference to it (``v1``
``Pod``, not a controller, not blocking its deletion), and Kubernetes' garbage collector
deletes the environments with the controller pod.

Kubernetes forbids owner references across namespaces: a dependent whose namespaced owner is
in another namespace counts as orphaned and is deleted at once. With the manifests' layout
(controllers in ``envfarm-system``, environments in ``envfarm-sandboxes``) no reference is
set; the pods carry the owner's uid as a label and its namespace and name as an annotation
instead, and the next controller to ``reap`` deletes the environments of controller pods that
no longer exist (one GET per departed owner, which needs ``get`` on pods in its namespace).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envfarm.errors import KubeError, KubeNotFound
from envfarm.k8s.api import PODS, KubeApi, KubeObject
from envfarm.k8s.objects import uid_of
from envfarm.settings import POD_ENVS, Settings

LABEL_OWNER_POD_UID = "envfarm.dev/owner-pod-uid"
ANNOTATION_OWNER_POD = "envfarm.dev/owner-pod"
ENV_NAME, ENV_UID, ENV_NAMESPACE = POD_ENVS

log = logging.getLogger(__name__)


class OwnerPod(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    uid: str = Field(min_length=1)
    namespace: str = Field(min_length=1)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> OwnerPod | None:
        """The pod the downward API describes; None outside a pod (any of them unset)."""
        facts = Settings.from_env(environ).owner_pod
        return None if facts is None else cls(**facts.model_dump())

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": self.name,
            "uid": self.uid,
            "controller": False,
            "blockOwnerDeletion": False,
        }

    def labels(self) -> dict[str, str]:
        return {LABEL_OWNER_POD_UID: self.uid}

    def annotations(self) -> dict[str, str]:
        return {ANNOTATION_OWNER_POD: f"{self.namespace}/{self.name}"}


async def departed_owners(
    api: KubeApi, pods: Iterable[KubeObject], me: OwnerPod | None
) -> set[str]:
    """The owner-pod uids among ``pods`` whose controller pod no longer exists (deleted, or
    replaced by one of the same name). An owner that cannot be looked up counts as alive:
    its environments then end with their TTL."""
    owners: dict[str, tuple[str, str]] = {}
    for pod in pods:
        uid = (pod["metadata"].get("labels") or {}).get(LABEL_OWNER_POD_UID)
        where = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_OWNER_POD, "")
        namespace, _, name = where.partition("/")
        if uid and namespace and name and (me is None or uid != me.uid):
            owners[uid] = (namespace, name)
    gone = set()
    for uid, (namespace, name) in sorted(owners.items()):
        try:
            current = await api.get(PODS, namespace, name)
        except KubeNotFound:
            gone.add(uid)
            continue
        except KubeError as exc:
            log.warning("cannot tell whether pod %s/%s still exists: %s", namespace, name, exc)
            continue
        if uid_of(current) != uid:
            gone.add(uid)
    return gone
