"""The agent phase of an episode: the session that acts in the started sandbox.

One of four drives it: an installed agent (``controller/installed_agents.py``), a multi-step
task's steps (``controller/steps.py``), a trainer's loop sending the actions (``agent/driven.py``),
or envfarm's own loop against the policy. Whichever it is, its messages, turns and outcome go
into the trajectory; a session the server rejected keeps the turns sampled before it.
"""

from __future__ import annotations

from dataclasses import dataclass

from envfarm.agent.driven import Driver
from envfarm.agent.extra_tools import ExtraTools
from envfarm.agent.loop import Agent, AgentLimits, AgentRun
from envfarm.agent.mcp_tools import McpTools
from envfarm.agent.skills import skills_section
from envfarm.agent.tools import ToolContext
from envfarm.controller.episode_request import EpisodeRequest
from envfarm.controller.installed_agents import AgentLayers, run_agent
from envfarm.controller.policies import ResolvedPolicy
from envfarm.controller.steps import StepSession
from envfarm.errors import RequestRejected, SessionAbandoned, TaskConfigError
from envfarm.grading.base import Grader
from envfarm.models.trajectory import AgentInfo, AgentOutcome, Trajectory
from envfarm.plan.models import EpisodePlan
from envfarm.policy.base import SamplingParams
from envfarm.sandbox.base import Sandbox
from envfarm.spec.mcp import mcp_section
from envfarm.spec.task import Task


@dataclass(frozen=True)
class AgentPhase:
    policy: ResolvedPolicy
    sampling: SamplingParams
    grader: Grader
    agent_layers: AgentLayers | None

    async def run(
        self,
        request: EpisodeRequest,
        plan: EpisodePlan,
        sandbox: Sandbox,
        traj: Trajectory,
        steps: StepSession | None,
    ) -> None:
        """The agent's whole session in ``sandbox``; what it said and did goes into ``traj``."""
        if self.agent_layers is not None:
            await self._installed(request, plan, sandbox, traj)
            return
        task = request.task
        servers = plan.agent.mcp_servers
        skills = await skills_section(sandbox, task.config.environment.skills_dir)
        instruction = task.instruction + mcp_section(servers) + skills
        async with McpTools(servers, sandbox) as mcp:
            if steps is not None:
                steps.agent.extra_tools = mcp
                run = await steps.run(mcp_section(servers) + skills)
            elif request.driver is not None:
                run = await self._driven(
                    request.driver, instruction, task, plan, sandbox, traj, mcp
                )
            else:
                agent = self._agent(task, plan, sandbox, request, mcp)
                try:
                    run = await agent.run(instruction)
                except RequestRejected:
                    keep_partial_session(traj, agent)
                    raise
        traj.messages, traj.turns, traj.outcome = run.messages, run.turns, run.outcome
        traj.segments = run.segments

    def steps(
        self, request: EpisodeRequest, plan: EpisodePlan, sandbox: Sandbox, traj: Trajectory
    ) -> StepSession | None:
        """A multi-step task's steps (``controller/steps.py``); None for any other task."""
        if not request.task.steps:
            return None
        if self.agent_layers is not None or request.driver is not None:
            raise TaskConfigError(
                "multi-step tasks ([[steps]]) run with envfarm's own agent loop, not an installed "
                "agent or a trainer's session"
            )
        return StepSession(
            request.task,
            plan,
            sandbox,
            self.grader,
            self._agent(request.task, plan, sandbox, request),
            traj,
            needs_solution=self.policy.needs_solution,
        )

    def _agent(
        self,
        task: Task,
        plan: EpisodePlan,
        sandbox: Sandbox,
        request: EpisodeRequest,
        extra_tools: ExtraTools | None = None,
    ) -> Agent:
        return Agent(
            # one endpoint per episode: prefix-cache hits
            self.policy.client.session(request.episode_id),
            sandbox,
            limits=_limits(plan),
            tools=self._tool_context(task, plan),
            sampling=self._sampling(request.seed),
            extra_tools=extra_tools,
        )

    async def _driven(
        self,
        driver: Driver,
        instruction: str,
        task: Task,
        plan: EpisodePlan,
        sandbox: Sandbox,
        traj: Trajectory,
        extra_tools: ExtraTools,
    ) -> AgentRun:
        traj.agent = AgentInfo(name=DRIVEN_AGENT)
        try:
            return await driver.drive(
                sandbox,
                instruction,
                limits=_limits(plan),
                tools=self._tool_context(task, plan),
                extra_tools=extra_tools,
            )
        except SessionAbandoned:
            if driver.partial is not None:
                traj.messages, traj.turns = driver.partial.messages, driver.partial.turns
                traj.outcome = driver.partial.outcome
            raise

    def _tool_context(self, task: Task, plan: EpisodePlan) -> ToolContext:
        env = dict(task.config.solution.env) if self.policy.needs_solution else {}
        user = plan.agent.oracle_user if self.policy.needs_solution else plan.agent.user
        return ToolContext(workdir=plan.agent.workdir, user=user, env=env)

    def _sampling(self, seed: int | None) -> SamplingParams:
        return self.sampling if seed is None else self.sampling.model_copy(update={"seed": seed})

    async def _installed(
        self, request: EpisodeRequest, plan: EpisodePlan, sandbox: Sandbox, traj: Trajectory
    ) -> None:
        assert self.agent_layers is not None
        await run_agent(
            self.agent_layers.spec,
            self.policy.client.session(request.episode_id),
            sandbox,
            request.task,
            traj,
            sampling=self._sampling(request.seed),
            max_turns=plan.agent.max_turns,
            timeout_s=plan.agent.timeout_s,
        )


def _limits(plan: EpisodePlan) -> AgentLimits:
    agent = plan.agent
    return AgentLimits(
        max_turns=agent.max_turns,
        timeout_s=agent.timeout_s,
        command_timeout_s=agent.command_timeout_s,
        context_budget=agent.context_budget,
    )


DRIVEN_AGENT = "driven"
"""``trajectory.agent.name`` of an episode whose actions a trainer's loop sent."""


def keep_partial_session(trajectory: Trajectory, agent: Agent) -> None:
    """Keep what a session produced before the server rejected its request: the turns sampled
    and the messages sent, up to the rejected request (``stop_reason: "error"``). The episode
    stays invalid (``request_rejected``) and is never scored; the turns show what led there."""
    trajectory.messages, trajectory.turns = agent.messages, agent.turns
    trajectory.segments = agent.segments
    trajectory.outcome = AgentOutcome(
        stop_reason="error", turns=len(agent.turns), malformed_tool_calls=agent.malformed
    )
