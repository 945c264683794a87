"""An EnvPool's pod template, rendered from its task by the pod builder (``podspec``).

``TaskTemplates`` is the ``TemplateSource`` the operator gives the EnvPool reconciler: it looks
the pool's ``spec.taskRef.name`` up in the operator's planned task library (a sandbox spec per
task) and renders the environment pod with the pool's ``runtimeClassName`` (else the plan's
runtime: gVisor's for a task whose ``[environment] runtime`` asks for it) and ``ttlSeconds``.
``nodeSelector`` and ``tolerations`` are copied into the pod spec as written (the CRD's schema
checks their shape): they say which nodes, such as a dedicated node pool, take the pool's pods.
An unknown task is a permanent error (the pool's Ready condition says so) until the pool or the
library changes.
"""

from __future__ import annotations

from collections.abc import Mapping

from envfarm.errors import TaskSpecError
from envfarm.k8s.api import KubeObject
from envfarm.plan.models import SandboxSpec
from envfarm.sandbox.kubernetes.podimages import ImageNaming, cluster_images
from envfarm.sandbox.kubernetes.podspec import PodOptions, environment_pod

DEFAULT_TTL_S = 7200
PLACEMENT = ("nodeSelector", "tolerations")
"""EnvPool spec fields that go into the pod spec unchanged."""


class TaskTemplates:
    def __init__(self, specs: Mapping[str, SandboxSpec], naming: ImageNaming | None = None) -> None:
        self.tasks = specs
        self.naming = naming or ImageNaming()

    async def __call__(self, pool: KubeObject) -> KubeObject:
        metadata, spec = pool["metadata"], pool.get("spec") or {}
        name = (spec.get("taskRef") or {}).get("name", "")
        task = self.tasks.get(name)
        if task is None:
            known = ", ".join(sorted(self.tasks)[:20]) or "none"
            raise TaskSpecError(
                f"EnvPool {metadata['namespace']}/{metadata['name']}",
                f"no task {name!r} in the operator's task library (known: {known})",
                field="spec.taskRef.name",
            )
        options = PodOptions(
            environment_id=metadata["name"],
            run_id=f"pool-{metadata['name']}",
            generate_name=f"{metadata['name']}-",
            runtime_class=spec.get("runtimeClassName") or task.runtime,
            ttl_seconds=int(spec.get("ttlSeconds") or DEFAULT_TTL_S),
            request_ratio=spec.get("requestRatio"),
        )
        pod = environment_pod(task, cluster_images(task.environment, self.naming), options)
        placement = {key: spec[key] for key in PLACEMENT if spec.get(key)}
        pod["spec"].update(placement)
        labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
        return {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod["spec"]}
