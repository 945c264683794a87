"""Delivered groups of real trajectories, for the trainer adapters' tests.

Each trajectory is a session of envfarm's own agent loop against the fake vLLM server over
loopback HTTP (byte tokens, deterministic logprobs, MoE routing as vLLM sends it, a policy
version header) in the in-memory sandbox; a context budget makes a session summarize and start
new segments. The group's advantages are the controller's. Only the rewards are set by hand,
as the graders would set them.
"""

from __future__ import annotations

from envfarm.agent.loop import Agent, AgentLimits
from envfarm.agent.tools import ToolContext
from envfarm.controller.groups import finalize_group
from envfarm.controller.training_data import settle_training_data
from envfarm.models.jobs import DeliveredGroup
from envfarm.models.trajectory import ErrorInfo, Provenance, Reward, Trajectory
from envfarm.policy import CaptureOptions, OpenAIPolicy, PolicyServer, SamplingParams
from envfarm.testing.fake_sandbox import FakeSandbox
from envfarm.testing.fake_vllm import FakeVLLM

MOE_LAYERS, TOP_K = 2, 2
SUMMARY_BUDGET = 2600
"""A context budget small enough that a session of ``LONG`` commands summarizes."""
LONG = [f"echo step {i} && printf '%0200d' 0" for i in range(6)]
SHORT = ["echo hello", "ls /app"]


async def session(
    commands: list[str],
    *,
    version: str,
    number: int,
    group_id: str,
    task_id: str = "alpha",
    budget: int | None = None,
) -> Trajectory:
    fake = FakeVLLM(commands=commands, version=version, routed_experts=True,
                    moe_layers=MOE_LAYERS, top_k=TOP_K)  # fmt: skip
    sandbox = FakeSandbox()
    await sandbox.start()
    async with (
        PolicyServer(fake) as server,
        OpenAIPolicy(server.base_url, "m", capture=CaptureOptions(profile="vllm")) as client,
    ):
        limits = AgentLimits(max_turns=40, context_budget=budget)
        sampling = SamplingParams(temperature=1.0)
        agent = Agent(client, sandbox, limits=limits, tools=ToolContext(workdir="/app"),
                      sampling=sampling)  # fmt: skip
        run = await agent.run("Run the commands, one per turn, then submit.")
    trajectory = Trajectory(
        trajectory_id=f"{group_id}-t{number}", episode_id=f"{group_id}-e{number}", job_id="job-1",
        group_id=group_id, task_id=task_id, messages=run.messages, turns=run.turns,
        segments=run.segments, outcome=run.outcome,
        provenance=Provenance(task_hash="h", envfarm_version="0"),
    )  # fmt: skip
    settle_training_data(trajectory)
    return trajectory


async def real_group(
    cursor: int,
    *,
    version: str = "3",
    dispatch_version: str | None = "3",
    staleness: int = 0,
    task_id: str = "alpha",
) -> DeliveredGroup:
    """Four episodes of one task: a long summarized one (reward 1), two short ones (rewards 0
    and 1), and one whose sandbox died (invalid reward)."""
    group_id = f"job-1-g{cursor}"
    plans = [(LONG, SUMMARY_BUDGET), (SHORT, None), (SHORT[:1], None), (SHORT, None)]
    members = [
        await session(commands, version=version, number=number, group_id=group_id,
                      task_id=task_id, budget=budget)
        for number, (commands, budget) in enumerate(plans)
    ]  # fmt: skip
    for member, value in zip(members, (1.0, 0.0, 1.0), strict=False):
        member.reward = Reward(value=value, valid=True, components={"reward": value})
    members[3].reward = Reward(valid=False, reason="the sandbox died")
    members[3].error = ErrorInfo(type="SandboxGone", message="exit 137", phase="agent")
    finalize_group(members, leave_one_out=False)
    trajectories = [m.model_dump(mode="json", by_alias=True) for m in members]
    return DeliveredGroup(cursor=cursor, group_id=group_id, task_id=task_id,
                          dispatch_version=dispatch_version, staleness=staleness,
                          trajectories=trajectories)  # fmt: skip
