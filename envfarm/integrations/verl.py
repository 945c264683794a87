"""verl: an agent loop whose episodes envfarm runs, returning verl's ``AgentLoopOutput``.

verl calls ``run(sampling_params, **row)`` once per rollout of a dataset row (``rollout.n`` times
per prompt, the copies sharing the row's ``uid``). ``EnvfarmAgentLoop`` makes those ``n`` calls
one envfarm group: the first call for a ``uid`` submits a job of the row's task with
``group_size = rollout.n`` (the other calls of that ``uid`` in this worker wait for it), and
each call takes the next trajectory of the group (a row without a ``uid``: a group of one).
The row names its task in a ``task_id`` column or in ``extra_info.task_id``. verl computes the
GRPO advantage itself, over ``uid``, from ``reward_score``, the raw graded reward. Register it
through verl's ``rollout.agent.agent_loop_config_path`` (docs/trainers.md); the entry's other
keys (``url``, ``job``, ``token``, ...) come to ``__init__``.

The mapping, without re-tokenizing (``envfarm.integrations.episodes``): ``prompt_ids`` the first
turn's prompt, ``response_ids`` everything after it (completions, tool output, template glue),
``response_mask`` 1 on sampled tokens, ``response_logprobs`` the sampling logprobs,
``routed_experts`` the last turn's routing as a ``(tokens, layers, top_k)`` array, cut as verl
cuts its own, ``num_turns`` the chat messages but the system prompt, and ``extra_fields``
``min_global_steps``/``max_global_steps`` (the policy versions behind the trajectory, which verl
reads for its staleness metrics). Prompt and response are cut to ``rollout.prompt_length`` and
``response_length`` the way verl's own loops cut them.

Segments: verl takes one output per call, so a trajectory that a summary (or a rewritten
history) split into several rows gives its last row, the final context that ended in the
graded outcome; ``extra_fields["envfarm_rows_left_out"]`` counts the others.

Versions: verl's weight version is its ``global_steps``, which its rollout server stamps on every
generation and an agent loop is never handed. The first call for a ``uid`` asks the server with
a one-token generation and publishes the answer to envfarm before submitting. Staleness: verl's
synchronous trainer generates each step on that step's weights, its one-step-off and fully async
modes lag by about one version (``async_training.staleness_threshold`` bounds the share of stale
samples, not a lag), so the bound defaults to 1, sent as the job's ``max_staleness``.

Invalid episodes: verl's loops have no notion of one (an output is expected for every row), so
an episode without a valid reward is returned with ``response_mask`` all 0 (no token of it is
trained) and ``reward_score`` 0.0, the placeholder slime's and SkyRL's coding agents use; it
still counts in its group's GRPO mean. A trajectory with no token data returns a one-token
placeholder, masked.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from envfarm.client import EnvfarmClient
from envfarm.integrations.episodes import (
    EpisodeRow,
    IntegrationError,
    episode_rows,
    routed_array,
    version_number,
)
from envfarm.integrations.feed import FedGroup, run_job
from envfarm.models.trajectory import Trajectory

try:
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopBase,
        AgentLoopMetrics,
        AgentLoopOutput,
    )
except ImportError:  # importable without verl (docs, type checks); usable only with it
    AgentLoopBase = object

DEFAULT_MAX_STALENESS = 1
MISSING = "the verl adapter needs verl: pip install 'envfarm[verl]'"


def _require_verl() -> None:
    if AgentLoopBase is object:
        raise IntegrationError(MISSING)


class _Claims:
    """This worker process's groups in the making, by ``uid``: each call takes the next
    trajectory of its ``uid``'s group."""

    def __init__(self) -> None:
        self.groups: dict[str, asyncio.Task[FedGroup]] = {}
        self.taken: dict[str, int] = {}
        self.clients: dict[str, EnvfarmClient] = {}

    def client(self, url: str, token: str | None) -> EnvfarmClient:
        if url not in self.clients:
            self.clients[url] = EnvfarmClient(url, token)
        return self.clients[url]

    async def claim(
        self, key: str, start: Callable[[], Awaitable[FedGroup]]
    ) -> tuple[FedGroup, int]:
        """The group of ``key`` (started by the first caller) and the index this caller takes."""
        if key not in self.groups:
            self.groups[key] = asyncio.ensure_future(start())
            self.taken[key] = 0
        pending = self.groups[key]
        try:
            group = await pending
        except BaseException:
            if self.groups.get(key) is pending:
                self.groups.pop(key)
                self.taken.pop(key, None)
            raise
        index = self.taken.get(key, 0)
        self.taken[key] = index + 1
        if index + 1 >= len(group.trajectories) and self.groups.get(key) is pending:
            self.groups.pop(key)
            self.taken.pop(key)
        if index >= len(group.trajectories):
            raise IntegrationError(
                f"{key}: more rollouts than its group's {len(group.trajectories)}"
            )
        return group, index


CLAIMS = _Claims()


def _plain(value: Any) -> Any:
    """A value of verl's (hydra's) config as plain JSON-ready Python."""
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def task_of(row: dict[str, Any]) -> str:
    extra = row.get("extra_info") or {}
    task = row.get("task_id") or (extra.get("task_id") if isinstance(extra, dict) else None)
    if not task:
        raise IntegrationError(
            "the dataset row names no envfarm task (task_id or extra_info.task_id)"
        )
    return str(task)


class EnvfarmAgentLoop(AgentLoopBase):  # type: ignore[misc]
    def __init__(
        self,
        *args: Any,
        url: str,
        job: dict[str, Any],
        token: str | None = None,
        max_staleness: int | None = DEFAULT_MAX_STALENESS,
        consumer: str = "verl",
        routed_layers_top_k: list[int] | None = None,
        **kwargs: Any,
    ) -> None:
        _require_verl()
        super().__init__(*args, **kwargs)
        self.url, self.token, self.job = url, token, _plain(job)
        self.max_staleness, self.consumer = max_staleness, consumer
        self.routed_layers_top_k = _plain(routed_layers_top_k)

    async def run(self, sampling_params: dict[str, Any], **row: Any) -> Any:
        uid = row.get("uid")
        size = int(self.rollout_config.n) if uid else 1
        task = task_of(row)
        group, index = await CLAIMS.claim(
            str(uid) if uid else uuid.uuid4().hex,
            lambda: self._group(task, size, sampling_params),
        )
        return self.output(group.trajectories[index])

    async def _group(self, task: str, size: int, sampling_params: dict[str, Any]) -> FedGroup:
        client = CLAIMS.client(self.url, self.token)
        version = await self.weight_version(sampling_params)
        if version is not None:
            await client.publish_version(str(version))
        body = {**self.job, "tasks": [task], "group_size": size}
        (group,) = await run_job(client, body, max_staleness=self.max_staleness,
                                 consumer=self.consumer)  # fmt: skip
        return group

    async def weight_version(self, sampling_params: dict[str, Any]) -> int | None:
        """verl's current weight version (``global_steps``), from its rollout server."""
        token = self.tokenizer.bos_token_id or self.tokenizer.eos_token_id or 0
        output = await self.server_manager.generate(
            request_id=uuid.uuid4().hex, prompt_ids=[token],
            sampling_params={**sampling_params, "max_tokens": 1},
        )  # fmt: skip
        steps = output.extra_fields.get("global_steps")
        return None if steps is None else int(steps)

    def output(self, trajectory: Trajectory) -> Any:
        """The trajectory as verl's ``AgentLoopOutput``."""
        return agent_loop_output(
            trajectory,
            prompt_length=int(self.rollout_config.prompt_length),
            response_length=int(self.rollout_config.response_length),
            pad_token_id=self.tokenizer.pad_token_id or 0,
            routed_layers_top_k=self.routed_layers_top_k,
        )


def agent_loop_output(
    trajectory: Trajectory,
    *,
    prompt_length: int,
    response_length: int,
    pad_token_id: int = 0,
    routed_layers_top_k: list[int] | None = None,
) -> Any:
    """The trajectory as verl's ``AgentLoopOutput``."""
    _require_verl()
    rows = episode_rows(trajectory)
    valid = trajectory.reward.valid and trajectory.reward.value is not None
    versions = trajectory.policy_versions
    extra: dict[str, Any] = {
        "min_global_steps": version_number(versions.min),
        "max_global_steps": version_number(versions.max),
        "envfarm_trajectory_id": trajectory.trajectory_id,
        "envfarm_valid": valid,
        "envfarm_rows_left_out": max(len(rows) - 1, 0),
    }
    metrics = AgentLoopMetrics(
        generate_sequences=trajectory.timings.agent_s or 0.0,
        compute_score=trajectory.timings.grading_s or 0.0,
    )
    turns = sum(1 for m in trajectory.messages if m.get("role") != "system")
    if not rows:
        return AgentLoopOutput(
            prompt_ids=[pad_token_id], response_ids=[pad_token_id], response_mask=[0],
            response_logprobs=[0.0], reward_score=0.0, num_turns=turns, metrics=metrics,
            extra_fields=extra,
        )  # fmt: skip
    row: EpisodeRow = rows[-1]
    cut = max(len(row.prompt_ids) - prompt_length, 0)
    prompt = row.prompt_ids[cut:]
    mask = (
        row.response_mask[:response_length]
        if valid
        else [0] * len(row.response_ids[:response_length])
    )
    routed = None
    if row.routed_experts is not None:
        routed = routed_array(row.routed_experts, routed_layers_top_k)[cut:][
            : len(prompt) + response_length
        ]
    reward = (
        float(trajectory.reward.value) if valid and trajectory.reward.value is not None else 0.0
    )
    return AgentLoopOutput(
        prompt_ids=prompt,
        response_ids=row.response_ids[:response_length],
        response_mask=mask,
        response_logprobs=row.response_logprobs[:response_length],
        routed_experts=routed,
        reward_score=reward,
        num_turns=turns,
        metrics=metrics,
        extra_fields=extra,
    )
