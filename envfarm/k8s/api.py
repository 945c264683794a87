"""The Kubernetes API as envfarm uses it: one small async interface, two implementations.

``KubeApi`` covers namespaced CRUD, merge patches, deletion with a propagation policy, watches
from a resourceVersion, the ``status`` and ``scale`` subresources, and a pod's attach/exec
stream. ``memory.MemoryKubeApi`` implements it in-process (with a simulated kubelet) for tests
and benchmarks; ``rest.RestKubeApi`` speaks to an API server over HTTP. Objects are plain JSON
dicts, as the server sends them: envfarm reads only the fields it needs, which is what kept
other Python controllers out of the deserialization cost the official client pays.

Errors are the ``KubeError`` family of ``envfarm.errors`` (404 ``KubeNotFound``, 409
``KubeConflict``, 410 ``KubeGone``, 422 ``KubeInvalid``, transient ``KubeUnavailable``);
implementations translate what they see into those and nothing else.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from envfarm.errors import KubeNotFound

KubeObject = dict[str, Any]
Propagation = Literal["Background", "Foreground", "Orphan"]
Subresource = Literal["status", "scale", "ephemeralcontainers"]
EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
STDIN, STDOUT, STDERR = 0, 1, 2


class ScaleSubresource(BaseModel):
    """Where a custom resource keeps what its ``scale`` subresource shows (dotted paths)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    spec_replicas_path: str = ".spec.replicas"
    status_replicas_path: str = ".status.replicas"
    label_selector_path: str | None = ".status.selector"


class Resource(BaseModel):
    """One resource type: how objects of ``(api_version, kind)`` are addressed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    api_version: str
    kind: str
    plural: str
    namespaced: bool = True
    status_subresource: bool = True
    scale: ScaleSubresource | None = None

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def key(self) -> str:
        """``plural.group`` (``pods`` for the core group), as RBAC and kubectl name it."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(
        self, namespace: str | None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The REST path: ``/api/v1/namespaces/NS/pods/NAME/status`` and the like."""
        prefix = f"/apis/{self.api_version}" if self.group else f"/api/{self.api_version}"
        parts = [prefix]
        if self.namespaced and namespace is not None:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name is not None:
            parts.append(name)
            if subresource is not None:
                parts.append(subresource)
        return "/".join(parts)


PODS = Resource(api_version="v1", kind="Pod", plural="pods")
CONFIG_MAPS = Resource(
    api_version="v1", kind="ConfigMap", plural="configmaps", status_subresource=False
)
SECRETS = Resource(api_version="v1", kind="Secret", plural="secrets", status_subresource=False)
SERVICES = Resource(api_version="v1", kind="Service", plural="services")
EVENTS = Resource(api_version="v1", kind="Event", plural="events", status_subresource=False)
DEPLOYMENTS = Resource(
    api_version="apps/v1", kind="Deployment", plural="deployments", scale=ScaleSubresource()
)
LEASES = Resource(
    api_version="coordination.k8s.io/v1", kind="Lease", plural="leases", status_subresource=False
)
GROUP = "envfarm.dev"
CRD_VERSION = "v1alpha1"
ENV_POOLS = Resource(
    api_version=f"{GROUP}/{CRD_VERSION}",
    kind="EnvPool",
    plural="envpools",
    scale=ScaleSubresource(),
)
ROLLOUT_JOBS = Resource(
    api_version=f"{GROUP}/{CRD_VERSION}", kind="RolloutJob", plural="rolloutjobs"
)
KNOWN: dict[tuple[str, str], Resource] = {
    (r.api_version, r.kind): r
    for r in (
        PODS,
        CONFIG_MAPS,
        SECRETS,
        SERVICES,
        EVENTS,
        DEPLOYMENTS,
        LEASES,
        ENV_POOLS,
        ROLLOUT_JOBS,
    )
}

ResourceLike = Resource | tuple[str, str]
Command = list[str]


def resolve(
    resource: ResourceLike, extra: dict[tuple[str, str], Resource] | None = None
) -> Resource:
    """The ``Resource`` for ``(apiVersion, kind)`` (or the descriptor itself)."""
    if isinstance(resource, Resource):
        return resource
    found = (extra or {}).get(resource) or KNOWN.get(resource)
    if found is None:
        api_version, kind = resource
        raise KubeNotFound(
            f"the server has no resource type for kind {kind!r} in {api_version!r}; "
            "pass a Resource descriptor for it",
            status=404,
            reason="NotFound",
        )
    return found


def resource_of(obj: KubeObject, extra: dict[tuple[str, str], Resource] | None = None) -> Resource:
    return resolve((str(obj.get("apiVersion", "")), str(obj.get("kind", ""))), extra)


class WatchEvent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: EventType
    object: KubeObject


class ObjectList(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[KubeObject]
    resource_version: str
    """The list's resourceVersion: watch from it to see every change after the list."""


class PodStream(Protocol):
    """A pod attach (or exec) stream: stdin one way, stdout and stderr the other.

    ``receive`` returns ``(STDOUT or STDERR, bytes)``, or None once the stream has ended."""

    async def send(self, data: bytes) -> None: ...

    async def receive(self) -> tuple[int, bytes] | None: ...

    async def close(self) -> None: ...


class KubeApi(Protocol):
    """Namespaced access to the Kubernetes API. ``namespace=None`` lists or watches every
    namespace. Every method raises only ``KubeError`` subclasses."""

    async def get(
        self,
        resource: ResourceLike,
        namespace: str,
        name: str,
        *,
        subresource: Subresource | None = None,
    ) -> KubeObject: ...

    async def list(
        self,
        resource: ResourceLike,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ObjectList: ...

    async def create(self, resource: ResourceLike, namespace: str, body: KubeObject) -> KubeObject:
        """``metadata.generateName`` gives a unique name when ``metadata.name`` is unset."""

    async def replace(
        self,
        resource: ResourceLike,
        namespace: str,
        name: str,
        body: KubeObject,
        *,
        subresource: Subresource | None = None,
    ) -> KubeObject:
        """Conflict when ``body``'s ``metadata.resourceVersion`` is not the current one."""

    async def patch(
        self,
        resource: ResourceLike,
        namespace: str,
        name: str,
        patch: KubeObject,
        *,
        subresource: Subresource | None = None,
    ) -> KubeObject:
        """A JSON merge patch (RFC 7386); a ``metadata.resourceVersion`` in it is a
        precondition (Conflict when stale)."""

    async def delete(
        self,
        resource: ResourceLike,
        namespace: str,
        name: str,
        *,
        propagation: Propagation | None = None,
        grace_period_seconds: int | None = None,
        resource_version: str | None = None,
    ) -> KubeObject:
        """Delete, or mark for deletion while finalizers remain; the object's last state."""

    def watch(
        self,
        resource: ResourceLike,
        namespace: str | None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: float | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Changes after ``resource_version`` (without one: ADDED for every object first).
        Raises ``KubeGone`` when the version is older than the server's history; ends
        when the server closes the watch (watch again from the last version seen)."""

    async def attach(
        self, namespace: str, pod: str, container: str, *, command: Command | None = None
    ) -> PodStream:
        """Attach to ``container``'s main process (stdin, stdout, stderr), or with
        ``command`` exec it there; one long-lived stream either way."""

    async def close(self) -> None: ...
