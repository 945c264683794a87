"""The one place a run is assembled: the sandbox backend from the process's ``Settings``, and
each job's ``EpisodeRunner`` from its request. ``envfarm run``, ``check``, ``serve`` and
``worker`` all take both from here, so a flag and an API field mean the same thing everywhere.

``settings.backend`` is a union with a ``kind`` discriminator: ``docker`` (the local engine, its
base images found as ``Settings.sources`` says) or ``kubernetes`` (pods in a namespace of the
cluster this process runs in, through its service account, else of the kubeconfig's current
context; owned by this process's pod when the downward API names it, pulling envfarm's images
from ``image_registry``). Each backend's SDK is imported only when it is chosen; the runtime is
not the backend's: each episode's plan carries it.

A runner holds the job's open policy (a built-in server or an endpoint pool) and its rubric
judge; both close when its context exits.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from envfarm.agent.specs import parse_spec, resolve_agent
from envfarm.controller.episode import EpisodeRunner, EpisodeWatcher
from envfarm.controller.installed_agents import AgentLayers
from envfarm.controller.planning import Planner, job_choices
from envfarm.controller.policies import JudgeSpec, PolicySpec, open_judge, open_policy
from envfarm.controller.versions import PolicyVersionBoard
from envfarm.grading.base import Grader
from envfarm.grading.rubric.judges import RubricGrading
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.models.jobs import JobPolicy, JobRequest
from envfarm.policy.base import SamplingParams
from envfarm.policy.builtin import BUILTIN_POLICIES
from envfarm.sandbox.base import SandboxBackend
from envfarm.sandbox.pool import WarmPools
from envfarm.settings import KubernetesChoice, Settings


@asynccontextmanager
async def open_backend(settings: Settings) -> AsyncIterator[SandboxBackend]:
    """The backend ``settings`` choose, closed when the context exits."""
    choice = settings.backend
    if isinstance(choice, KubernetesChoice):
        async with _kubernetes(settings, choice) as backend:
            yield backend
        return
    from envfarm.sandbox.docker.backend import DockerBackend

    backend = DockerBackend(settings.sources())
    try:
        yield backend
    finally:
        await backend.close()


@asynccontextmanager
async def _kubernetes(
    settings: Settings, choice: KubernetesChoice
) -> AsyncIterator[SandboxBackend]:
    from envfarm.k8s.kubeconfig import in_cluster_config, load_kubeconfig
    from envfarm.k8s.rest import RestKubeApi
    from envfarm.sandbox.kubernetes.backend import KubernetesBackend, KubernetesBackendConfig
    from envfarm.sandbox.kubernetes.ownerpod import OwnerPod
    from envfarm.sandbox.kubernetes.podimages import ImageNaming

    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    config = in_cluster_config() if in_cluster else await load_kubeconfig()
    owner = settings.owner_pod
    backend_config = KubernetesBackendConfig(
        namespace=choice.namespace,
        owner_pod=OwnerPod(**owner.model_dump()) if owner is not None else None,
        images=ImageNaming(registry=settings.image_registry),
    )
    api = RestKubeApi(config)
    backend = KubernetesBackend(api, backend_config)
    try:
        yield backend
    finally:
        await backend.close()
        await api.close()


def policy_spec(policy: JobPolicy) -> PolicySpec:
    return PolicySpec.model_validate(dict(policy))


def judge_spec(request: JobRequest) -> JudgeSpec | None:
    judge = request.judge
    return JudgeSpec.model_validate(dict(judge)) if judge else None


def agent_layers(request: JobRequest, backend: SandboxBackend) -> AgentLayers | None:
    """The job's installed agent, or None for the built-in loop (TaskSpecError if unknown)."""
    spec = (
        parse_spec(request.agent_spec, "agent_spec")
        if request.agent_spec is not None
        else resolve_agent(request.agent)
    )
    return None if spec is None else AgentLayers(backend, spec)


@asynccontextmanager
async def open_runner(
    request: JobRequest,
    backend: SandboxBackend,
    *,
    run_id: str,
    versions: PolicyVersionBoard | None = None,
    artifacts_dir: Path | None = None,
    pools: WarmPools | None = None,
    grader: Grader | None = None,
    watcher: EpisodeWatcher | None = None,
    settings: Settings | None = None,
) -> AsyncIterator[EpisodeRunner]:
    """The runner of ``request``'s episodes on ``backend``; ``artifacts_dir``: where each
    episode's grading artifacts go; ``grader``: default ``TestScriptGrader``; ``settings``: the
    defaults its episodes are planned with where the job and the task say nothing (None: the
    environment's)."""
    builtin = request.policy.base_url in BUILTIN_POLICIES
    async with (
        open_policy(policy_spec(request.policy), versions) as policy,
        open_judge(judge_spec(request)) as judge,
    ):
        runner = EpisodeRunner(
            backend=backend,
            policy=policy,
            grader=grader or TestScriptGrader(),
            run_id=run_id,
            sampling=SamplingParams.model_validate(dict(request.sampling)),
            rubrics=RubricGrading(judge, allow_unjudged=request.allow_unjudged or builtin),
            artifacts_dir=artifacts_dir,
            pools=pools,
            agent_layers=agent_layers(request, backend),
            background_teardown=True,
            watcher=watcher,
            planner=Planner(backend, settings, job_choices(request)),
        )
        try:
            yield runner
        finally:
            await runner.drain()
