"""slime (THUDM): a custom rollout function that returns envfarm's groups as slime ``Sample``s.

slime is not on PyPI (the package of that name there is another project), so this module is
written against slime's source (``slime.utils.types.Sample``, the rollout function's output
``slime.rollout.base_types.RolloutFnTrainOutput``, and how ``slime.ray.rollout`` turns samples
into training data) and checked against a checkout of it (bench/RESULTS.md).

``--rollout-function-path envfarm.integrations.slime.generate_rollout``, with ``envfarm_url``,
``envfarm_job`` (a job id, or a job request that is submitted, and submitted again when it
ends) and optionally ``envfarm_token`` and ``envfarm_max_staleness`` set on slime's ``args``
through ``--custom-config-path``. Each call returns ``rollout_batch_size`` groups of
``n_samples_per_prompt`` entries (a request's ``group_size`` is set to it), taken from one
standing ``GroupFeed`` that lives across calls on a thread of its own. slime's data source is
not read: the tasks are the job's.

The mapping, without re-tokenizing (``envfarm.integrations.episodes``): each trajectory becomes
a ``list[Sample]``, one per training row, as slime's own agent rollouts fan out (a summary or a
rewritten history starts a row): ``tokens`` the whole sequence, ``response_length`` what follows
the first turn's prompt, ``loss_mask`` 1 on sampled tokens, ``rollout_log_probs`` the sampling
logprobs, ``rollout_routed_experts`` the last turn's routing as ``(tokens, layers, top_k)``,
``weight_versions`` the version of each turn of the row, ``status`` ``TRUNCATED`` when the
last completion hit its length limit. Every row of a trajectory gets the trajectory's whole
reward and the same ``rollout_id``, as slime's trajectory manager gives them, so slime's
per-rollout loss reducer counts the trajectory once; ``metadata`` keeps envfarm's ids and
advantage.

Versions: slime's weight version is the rollout id (weights are updated after each rollout's
training step); it is published before the groups are taken. Staleness: slime's asynchronous
trainer generates one rollout ahead, a lag of one version, so the bound defaults to 1.

Invalid episodes: as slime's coding agent example aborts a failed rollout: a placeholder
``Sample`` with ``tokens [0, 0]``, ``response_length`` 1, ``loss_mask [0]``, reward 0.0,
``remove_sample`` true and status ``ABORTED``, kept in its group (slime asserts every group
has ``n_samples_per_prompt`` entries); slime zeroes the loss mask of a removed sample again.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import AsyncIterator
from typing import Any

from envfarm.client import EnvfarmClient
from envfarm.integrations.episodes import IntegrationError, episode_rows, routed_array
from envfarm.integrations.feed import FedGroup, GroupFeed, job_body
from envfarm.models.trajectory import Trajectory

DEFAULT_MAX_STALENESS = 1
_samples = itertools.count()
_groups = itertools.count()


def _slime() -> tuple[Any, Any]:
    try:
        from slime.rollout.base_types import RolloutFnTrainOutput
        from slime.utils.types import Sample
    except ImportError as exc:
        raise IntegrationError("the slime adapter runs inside slime (THUDM/slime)") from exc
    return Sample, RolloutFnTrainOutput


def trajectory_samples(
    trajectory: Trajectory, *, index: int, group_index: int, layers_top_k: Any = None
) -> list[Any]:
    """One trajectory as slime ``Sample``s (one per training row, or the aborted placeholder)."""
    sample_cls, _ = _slime()
    opening = _opening(trajectory.messages)
    versions = {turn.index: turn.policy_version for turn in trajectory.turns}
    value = trajectory.reward.value
    rows = episode_rows(trajectory)
    common = {"index": index, "group_index": group_index, "rollout_id": index,
              "prompt": opening, "session_id": trajectory.trajectory_id}  # fmt: skip
    metadata = {"envfarm_trajectory_id": trajectory.trajectory_id,
                "envfarm_group_id": trajectory.group_id, "envfarm_task_id": trajectory.task_id,
                "envfarm_advantage": trajectory.advantage}  # fmt: skip
    if not (trajectory.reward.valid and value is not None and rows):
        reason = trajectory.reward.reason or "no token data"
        return [sample_cls(**common, tokens=[0, 0], response_length=1, loss_mask=[0],
                           rollout_log_probs=[0.0], reward=0.0, remove_sample=True,
                           status=sample_cls.Status.ABORTED,
                           metadata={**metadata, "abort_reason": reason})]  # fmt: skip
    samples = []
    for row in rows:
        routed = None
        if row.routed_experts is not None:
            routed = routed_array(row.routed_experts, layers_top_k)
        truncated = row.finish_reason == "length"
        samples.append(
            sample_cls(
                **common,
                tokens=row.tokens,
                response_length=len(row.response_ids),
                loss_mask=row.response_mask,
                rollout_log_probs=row.response_logprobs,
                rollout_routed_experts=routed,
                weight_versions=[str(versions[t]) for t in row.turns if versions[t] is not None],
                reward=float(value),
                status=sample_cls.Status.TRUNCATED if truncated else sample_cls.Status.COMPLETED,
                metadata={**metadata, "segment": row.segment, "row": row.index},
            )
        )
    return samples


def group_samples(group: FedGroup, *, group_index: int, layers_top_k: Any = None) -> list[Any]:
    return [
        trajectory_samples(t, index=next(_samples), group_index=group_index,
                           layers_top_k=layers_top_k)
        for t in group.trajectories
    ]  # fmt: skip


def _opening(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for position, message in enumerate(messages):
        if message.get("role") == "assistant":
            return messages[:position]
    return list(messages)


class _Runner:
    """The feed and its event loop, alive across rollout calls."""

    def __init__(self, url: str, job: Any, token: str | None, max_staleness: int | None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="envfarm-slime",
                                       daemon=True)  # fmt: skip
        self.thread.start()
        self.client = self._call(self._client(url, token))
        self.feed = GroupFeed(self.client, job, max_staleness=max_staleness, consumer="slime")
        self.groups: AsyncIterator[FedGroup] = aiter(self.feed)

    async def _client(self, url: str, token: str | None) -> EnvfarmClient:
        return EnvfarmClient(url, token)

    def _call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    async def _take(self, count: int, version: int) -> list[FedGroup]:
        await self.feed.publish(version)
        return [await anext(self.groups) for _ in range(count)]

    def take(self, count: int, version: int) -> list[FedGroup]:
        return self._call(self._take(count, version))  # type: ignore[no-any-return]


_runner: _Runner | None = None


def generate_rollout(args: Any, rollout_id: int, data_source: Any = None,
                     evaluation: bool = False) -> Any:  # fmt: skip
    """slime's rollout function: ``rollout_batch_size`` groups of envfarm trajectories."""
    global _runner
    _, output_cls = _slime()
    if evaluation:
        raise IntegrationError("the envfarm rollout function trains only: give slime an eval one")
    if _runner is None:
        job = args.envfarm_job
        if not isinstance(job, str):
            job = {**job_body(job, None), "group_size": int(args.n_samples_per_prompt)}
        bound = getattr(args, "envfarm_max_staleness", DEFAULT_MAX_STALENESS)
        _runner = _Runner(args.envfarm_url, job, getattr(args, "envfarm_token", None), bound)
    layers_top_k = getattr(args, "envfarm_routed_layers_top_k", None)
    groups = _runner.take(int(args.rollout_batch_size), int(rollout_id))
    samples = [group_samples(g, group_index=next(_groups), layers_top_k=layers_top_k)
               for g in groups]  # fmt: skip
    return output_cls(samples=samples, metrics={
        "envfarm_groups_dropped_stale": _runner.feed.dropped_stale})  # fmt: skip
