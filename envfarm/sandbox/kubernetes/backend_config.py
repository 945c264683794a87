"""The Kubernetes backend's configuration: where environment pods run, how long they may live,
what they are named and owned by, how envfarm talks to their helper, and which EnvPools serve
warm ones."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from envfarm.sandbox.kubernetes.ownerpod import OwnerPod
from envfarm.sandbox.kubernetes.podimages import ImageNaming
from envfarm.sandbox.kubernetes.podspec import GVISOR_RUNTIME_CLASS


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
    run_as_user: int | None = None
    owner: dict[str, Any] | None = None
    """An ownerReference for every pod (a RolloutJob, say): deleting it removes them."""
    owner_pod: OwnerPod | None = None
    """The controller's own pod: deleting it removes the environments it started."""
    channel: Literal["attach", "exec"] = "attach"
    output_cap: int = 4 * 1024 * 1024
    pools: dict[str, str] = Field(default_factory=dict)
    """Task id -> EnvPool to claim a warm environment from (a cold start when none is ready)."""
    discover_pools: bool = True
    """Also claim from the namespace's EnvPools, found by their task (``pool_directory``)."""
