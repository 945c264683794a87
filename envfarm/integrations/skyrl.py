"""SkyRL: a generator whose trajectories envfarm runs, returning SkyRL's ``GeneratorOutput``.

SkyRL's trainer hands ``generate()`` a batch of prompts (``n_samples_per_prompt`` copies each,
told apart by ``trajectory_ids``: the same ``instance_id``, ``repetition_id`` 0..n-1) and wants
one output per copy, in order. ``EnvfarmGenerator`` runs the batch as one envfarm job: one task
per instance (named by the row's ``env_extras["task_id"]``), ``group_size`` the copies per
instance, so each instance is one envfarm group and copy ``k`` gets the group's ``k``-th
trajectory. SkyRL computes the GRPO advantage itself, so ``rewards`` are the raw graded rewards.

The mapping, without re-tokenizing (``envfarm.integrations.episodes``): ``prompt_token_ids`` the
first turn's prompt, ``response_ids`` all after it, ``loss_masks`` 1 on sampled tokens,
``rollout_logprobs`` the sampling logprobs, ``rollout_expert_indices`` the routing as a
``(tokens, layers, top_k)`` array when every row has one, ``stop_reasons`` the last turn's finish
reason, ``trajectory_ids`` as given.

Segments: with ``step_wise=True`` (SkyRL's ``generator.step_wise_trajectories``) each training
row of a trajectory, one per context segment or rewritten history, is a step of its own,
``is_last_step`` on the last, the reward on the last token of the last step and 0 elsewhere as
SkyRL's step-wise generator lays it out (SkyRL broadcasts the last step's advantage to the
others). Without it SkyRL takes one sequence per trajectory, and the last row (the final
context) is returned.

Versions: ``batch_metadata.global_step`` is SkyRL's weight version; it is published to envfarm
before the job is submitted. Staleness: SkyRL's bound is
``trainer.fully_async.max_staleness_steps`` (default 4), sent as the job's ``max_staleness``.

Invalid episodes: SkyRL wants an output for every copy and no trained token from a failed
rollout (its output validation expects a batch where every rollout failed to be all
loss-masked), so an episode without a valid reward keeps its row with ``loss_masks`` all 0 and
reward 0.0; one with no token data at all gets a one-token masked placeholder.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from envfarm.client import EnvfarmClient
from envfarm.integrations.episodes import EpisodeRow, IntegrationError, episode_rows, routed_array
from envfarm.integrations.feed import FedGroup, run_job
from envfarm.models.trajectory import Trajectory

try:
    from skyrl.train.generators.base import GeneratorInterface
except ImportError:
    try:  # skyrl-train, the package's earlier name
        from skyrl_train.generators.base import GeneratorInterface
    except ImportError:  # importable without SkyRL (docs, type checks); usable only with it
        GeneratorInterface = object

DEFAULT_MAX_STALENESS = 4


def task_of(extras: dict[str, Any] | None) -> str:
    task = (extras or {}).get("task_id")
    if not task:
        raise IntegrationError("a SkyRL row names no envfarm task (env_extras['task_id'])")
    return str(task)


def instances(input_batch: dict[str, Any]) -> list[tuple[str, int]]:
    """Each row's (instance, copy): from ``trajectory_ids``, else every row its own."""
    ids = input_batch.get("trajectory_ids")
    if ids is None:
        return [(f"row-{i}", 0) for i in range(len(input_batch["prompts"]))]
    return [(str(t.instance_id), int(t.repetition_id)) for t in ids]


class EnvfarmGenerator(GeneratorInterface):  # type: ignore[misc]
    def __init__(
        self,
        url: str,
        job: dict[str, Any],
        *,
        token: str | None = None,
        max_staleness: int | None = DEFAULT_MAX_STALENESS,
        step_wise: bool = False,
        consumer: str = "skyrl",
        pad_token_id: int = 0,
        routed_layers_top_k: list[int] | None = None,
    ) -> None:
        if GeneratorInterface is object:
            raise IntegrationError(
                "the SkyRL adapter needs SkyRL (Python 3.12): pip install 'envfarm[skyrl]'"
            )
        self.url, self.job, self.token = url, dict(job), token
        self.max_staleness, self.step_wise, self.consumer = max_staleness, step_wise, consumer
        self.pad_token_id, self.routed_layers_top_k = pad_token_id, routed_layers_top_k

    async def generate(self, input_batch: dict[str, Any]) -> dict[str, Any]:
        rows = instances(input_batch)
        extras = input_batch.get("env_extras") or [None] * len(rows)
        tasks: dict[str, str] = {}
        for (instance, _), row_extras in zip(rows, extras, strict=True):
            tasks.setdefault(instance, task_of(row_extras))
        size = max(copy for _, copy in rows) + 1
        async with EnvfarmClient(self.url, self.token) as client:
            metadata = input_batch.get("batch_metadata")
            if metadata is not None:
                await client.publish_version(str(metadata.global_step))
            body = {**self.job, "tasks": list(tasks.values()), "group_size": size}
            groups = await run_job(client, body, max_staleness=self.max_staleness,
                                   consumer=self.consumer)  # fmt: skip
        by_instance = assign(list(tasks.items()), groups)
        trajectories = [by_instance[instance].trajectories[copy] for instance, copy in rows]
        return generator_output(
            trajectories, input_batch.get("trajectory_ids"), step_wise=self.step_wise,
            pad_token_id=self.pad_token_id, routed_layers_top_k=self.routed_layers_top_k,
        )  # fmt: skip


def assign(instances: list[tuple[str, str]], groups: list[FedGroup]) -> dict[str, FedGroup]:
    """Each instance's group: groups of one task go to that task's instances in order."""
    pending: dict[str, list[FedGroup]] = defaultdict(list)
    for group in groups:
        pending[group.meta.task_id].append(group)
    assigned = {}
    for instance, task in instances:
        if not pending[task]:
            raise IntegrationError(f"the job delivered no group for task {task!r}")
        assigned[instance] = pending[task].pop(0)
    return assigned


def generator_output(
    trajectories: list[Trajectory],
    trajectory_ids: list[Any] | None,
    *,
    step_wise: bool = False,
    pad_token_id: int = 0,
    routed_layers_top_k: list[int] | None = None,
) -> dict[str, Any]:
    """SkyRL's ``GeneratorOutput`` for these trajectories, one (or, step-wise, one per row)
    per trajectory, in order."""
    out: dict[str, list[Any]] = defaultdict(list)
    for position, trajectory in enumerate(trajectories):
        valid = trajectory.reward.valid and trajectory.reward.value is not None
        reward = (
            float(trajectory.reward.value) if valid and trajectory.reward.value is not None else 0.0
        )
        rows = episode_rows(trajectory) or [_placeholder(trajectory, pad_token_id)]
        steps = rows if step_wise else rows[-1:]
        for row in steps:
            mask = row.response_mask if valid else [0] * len(row.response_ids)
            out["prompt_token_ids"].append(row.prompt_ids)
            out["response_ids"].append(row.response_ids)
            out["loss_masks"].append(mask)
            out["rollout_logprobs"].append(row.response_logprobs)
            out["stop_reasons"].append(row.finish_reason or "stop")
            out["routed"].append(row.routed_experts)
            if step_wise:
                per_token = [0.0] * len(row.response_ids)
                if row.last:
                    per_token[-1] = reward
                out["rewards"].append(per_token)
                out["is_last_step"].append(row.last)
                out["trajectory_ids"].append(trajectory_ids[position] if trajectory_ids else None)
            else:
                out["rewards"].append(reward)
    return _output(out, trajectory_ids, step_wise, routed_layers_top_k)


def _output(
    out: dict[str, list[Any]],
    trajectory_ids: list[Any] | None,
    step_wise: bool,
    routed_layers_top_k: list[int] | None,
) -> dict[str, Any]:
    arrays = [
        None if r is None else routed_array(r, routed_layers_top_k) for r in out.pop("routed")
    ]
    shaped = next((a for a in arrays if a is not None), None)
    expert_indices = None
    if shaped is not None and all(
        a is not None or not any(mask) for a, mask in zip(arrays, out["loss_masks"], strict=True)
    ):
        # a row that trains nothing may carry a one-row dummy route (SkyRL pads the rest)
        expert_indices = [shaped[:1] * 0 if a is None else a for a in arrays]
    return {
        "prompt_token_ids": out["prompt_token_ids"],
        "response_ids": out["response_ids"],
        "rewards": out["rewards"],
        "loss_masks": out["loss_masks"],
        "stop_reasons": out["stop_reasons"],
        "rollout_metrics": None,
        "rollout_logprobs": out["rollout_logprobs"],
        "trajectory_ids": out["trajectory_ids"] if step_wise else trajectory_ids,
        "trajectory_generation_times": None,
        "trajectory_time_splits": None,
        "rollout_expert_indices": expert_indices,
        "rollout_sample_support": None,
        "is_last_step": out["is_last_step"] if step_wise else None,
        "env_metrics": [{} for _ in out["response_ids"]],
        "pixel_values": None,
        "image_grid_thw": None,
    }


def _placeholder(trajectory: Trajectory, pad_token_id: int) -> EpisodeRow:
    return EpisodeRow(
        trajectory_id=trajectory.trajectory_id, group_id=trajectory.group_id,
        task_id=trajectory.task_id, index=0, count=1, segment=0, turns=(),
        prompt_ids=[pad_token_id], response_ids=[pad_token_id], response_mask=[0],
        response_logprobs=[0.0], routed_experts=None, reward=None, valid=False,
        advantage=None, version_min=None, version_max=None, finish_reason=None,
    )  # fmt: skip
