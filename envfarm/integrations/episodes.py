"""A delivered trajectory as trainer-neutral training rows: what every trainer adapter maps.

A trainer of the first shape (envfarm runs the agent) wants, per training sequence, the prompt
ids, the response ids with a mask over what the policy sampled, the sampling logprobs, the MoE
routing of the sequence, the reward or advantage, and the policy versions behind it. Those come
from the trajectory's merged training samples (``envfarm.models.token_layout``): consecutive
turns whose prompts extend one another become one sequence, so tool output, template glue and
the turns after it sit in the response with mask 0. Nothing is re-tokenized.

A trajectory gives one row per merged sample. A summary that restarted the context (a new
segment) or a chat template that rewrote history starts a new row, so a long session can give
several; ``index`` and ``count`` say where a row sits, and every row of a trajectory carries the
trajectory's reward and advantage (each trainer's adapter decides what a row that is not the
last one gets). A turn whose token data is absent or faulty is left out and splits the rows
around it. A trajectory with no usable turn gives no row at all: the adapters then build the
placeholder their trainer expects, or drop it.

Routing: each row carries the ``RoutedExperts`` of its last turn, whose prompt is the row's
whole sequence but for that turn's completion, so the server's rows cover the sequence (vLLM:
all tokens but the last). ``routed_array`` turns it into a ``(rows, layers, top_k)`` array.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from envfarm.errors import EnvfarmError
from envfarm.models.token_layout import full_prompts, training_samples
from envfarm.models.trajectory import RoutedExperts, Trajectory


class IntegrationError(EnvfarmError):
    """A trainer adapter cannot map what envfarm delivered onto its trainer's record (a
    missing trainer package, a batch whose rows name no task, routing of an unknown shape)."""


@dataclass(frozen=True)
class EpisodeRow:
    """One training sequence of a trajectory: ``prompt_ids + response_ids`` is the sequence
    exactly as sampled; ``response_mask`` is 1 on tokens the policy sampled."""

    trajectory_id: str
    group_id: str
    task_id: str
    index: int
    """The row's place among its trajectory's rows (0-based)."""
    count: int
    """How many rows the trajectory gave."""
    segment: int
    """The context segment the row's turns belong to (0 until the first summary)."""
    turns: tuple[int, ...]
    """Indices of the trajectory's turns merged into this row."""
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float]
    """Sampling logprob of each response token; 0.0 where the mask is 0."""
    routed_experts: RoutedExperts | None
    reward: float | None
    """The graded reward; None when the episode has no valid reward."""
    valid: bool
    advantage: float | None
    """envfarm's group-relative advantage (None for a group of one or an invalid reward)."""
    version_min: str | None
    version_max: str | None
    finish_reason: str | None
    """The last turn's finish reason (``length`` when the completion hit its token limit)."""

    @property
    def last(self) -> bool:
        return self.index == self.count - 1

    @property
    def tokens(self) -> list[int]:
        return self.prompt_ids + self.response_ids


def episode_rows(trajectory: Trajectory) -> list[EpisodeRow]:
    """The trajectory's training rows, in order (empty when no turn has usable token data)."""
    prompts = list(full_prompts(trajectory.turns))
    turns = {turn.index: turn for turn in trajectory.turns}
    positions = {turn.index: i for i, turn in enumerate(trajectory.turns)}
    samples = training_samples(trajectory.turns)
    reward = trajectory.reward
    rows = []
    for index, sample in enumerate(samples):
        first, last = turns[sample.turns[0]], turns[sample.turns[-1]]
        start = len(prompts[positions[first.index]] or [])
        rows.append(
            EpisodeRow(
                trajectory_id=trajectory.trajectory_id,
                group_id=trajectory.group_id,
                task_id=trajectory.task_id,
                index=index,
                count=len(samples),
                segment=sample.segment,
                turns=tuple(sample.turns),
                prompt_ids=sample.token_ids[:start],
                response_ids=sample.token_ids[start:],
                response_mask=sample.loss_mask[start:],
                response_logprobs=sample.logprobs[start:],
                routed_experts=last.routed_experts,
                reward=reward.value if reward.valid else None,
                valid=reward.valid and reward.value is not None,
                advantage=trajectory.advantage,
                version_min=trajectory.policy_versions.min,
                version_max=trajectory.policy_versions.max,
                finish_reason=last.finish_reason,
            )
        )
    return rows


def version_number(version: str | None) -> int | None:
    """A policy version as the integer step trainers count in, or None when it is not one."""
    if version is None:
        return None
    try:
        number = float(version)
    except ValueError:
        return None
    return int(number) if math.isfinite(number) and number == int(number) else None


def routed_array(experts: RoutedExperts, layers_top_k: Sequence[int] | None = None) -> Any:
    """The routing as a NumPy ``(rows, layers, top_k)`` array (numpy comes with every trainer).

    vLLM's arrays have that shape already; SGLang's are flat, so ``layers_top_k`` (the model's
    MoE layers and top-k) is needed to fold them."""
    import numpy as np

    array = np.frombuffer(
        base64.b64decode(experts.data), dtype=np.dtype(experts.dtype).newbyteorder("<")
    )
    shape = list(experts.shape)
    if len(shape) == 3:
        return array.reshape(shape)
    if layers_top_k is None or len(layers_top_k) != 2:
        raise IntegrationError(
            f"routed experts of shape {shape} are flat (SGLang): give the model's (MoE layers, "
            "top_k) to fold them into (rows, layers, top_k)"
        )
    layers, top_k = layers_top_k
    return array.reshape(-1, layers, top_k)
