"""The controller's side of installed agents: their image layer per task image, and their run.

An agent's layer is built once per task image and reused by every episode (``AgentLayers``).
A failed build is retried once, as an infrastructure fault would be (a registry timeout); one
that fails again is bad input (``AgentInstallError``): the episode records it and is never
scored. A missing runtime is bad input at once.
"""

from __future__ import annotations

import asyncio

from envfarm.agent.capture.session import CaptureLimits
from envfarm.agent.installed import run_installed
from envfarm.agent.specs import AgentSpec
from envfarm.errors import AgentInstallError, ImageError
from envfarm.models.trajectory import AgentInfo, Trajectory
from envfarm.policy.base import PolicyClient, SamplingParams
from envfarm.sandbox.base import PreparedImage, Sandbox, SandboxBackend
from envfarm.sandbox.images.agent_layer import agent_images
from envfarm.spec.task import Task

INSTALL_ATTEMPTS = 2


class AgentLayers:
    def __init__(self, backend: SandboxBackend, spec: AgentSpec) -> None:
        self.backend, self.spec = backend, spec
        self._built: dict[str, asyncio.Task[PreparedImage]] = {}

    async def image(self, image: PreparedImage) -> PreparedImage:
        key = image.image_id or image.tag
        if key not in self._built or (self._built[key].done() and self._built[key].exception()):
            self._built[key] = asyncio.ensure_future(self._build(image))
        return await asyncio.shield(self._built[key])

    async def _build(self, image: PreparedImage) -> PreparedImage:
        images, layer = agent_images(self.backend), self.spec.layer()
        for attempt in range(INSTALL_ATTEMPTS):
            try:
                return await images.with_agent(image, layer)
            except AgentInstallError:
                raise
            except ImageError as exc:
                if attempt + 1 == INSTALL_ATTEMPTS:
                    raise AgentInstallError(
                        f"agent {self.spec.name} {self.spec.version} failed to install "
                        f"{INSTALL_ATTEMPTS} times: {exc}"
                    ) from exc
        raise AssertionError("unreachable")


async def run_agent(
    spec: AgentSpec,
    policy: PolicyClient,
    sandbox: Sandbox,
    task: Task,
    trajectory: Trajectory,
    *,
    sampling: SamplingParams,
    max_turns: int,
    timeout_s: float,
) -> None:
    """Run the installed agent on ``task``; fill the trajectory's session fields."""
    config = task.config
    run = await run_installed(
        spec,
        policy,
        sandbox,
        task.instruction,
        sampling=sampling,
        limits=CaptureLimits(max_turns=max_turns, timeout_s=timeout_s),
        workdir=config.environment.workdir or "/",
        user=config.agent.user,
        mcp_servers=config.environment.mcp_servers,
        skills_dir=config.environment.skills_dir,
    )
    trajectory.messages, trajectory.turns, trajectory.outcome = run.messages, run.turns, run.outcome
    trajectory.agent = AgentInfo(
        name=spec.name,
        version=spec.version,
        exit_code=run.exit_code,
        output_tail=run.output_tail,
        requests=run.requests,
    )
