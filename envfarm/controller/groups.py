"""Group-relative advantages (GRPO): ``(r - mean) / (std + 1e-6)`` over the group's valid rewards.

Population standard deviation. A group whose valid rewards do not vary gets advantage 0 and is
marked, so a trainer can skip it. A group of one (or with a single valid reward) gets null.
Episodes with an invalid reward get null: they carry no learning signal.
"""

from __future__ import annotations

import statistics

from envfarm.models.trajectory import Trajectory

EPSILON = 1e-6


def assign_advantages(group: list[Trajectory], *, leave_one_out: bool = False) -> None:
    valid = [t for t in group if t.reward.valid and t.reward.value is not None]
    rewards = [t.reward.value for t in valid if t.reward.value is not None]
    if len(rewards) < 2:
        return
    zero_variance = max(rewards) == min(rewards)
    for trajectory in group:
        trajectory.group_zero_variance = zero_variance
    if zero_variance:
        for trajectory in valid:
            trajectory.advantage = 0.0
        return
    mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
    for trajectory, reward in zip(valid, rewards, strict=True):
        if leave_one_out:
            others = len(rewards) - 1
            baseline = (sum(rewards) - reward) / others
            trajectory.advantage = (reward - baseline) / (std + EPSILON)
        else:
            trajectory.advantage = (reward - mean) / (std + EPSILON)


def finalize_group(group: list[Trajectory], leave_one_out: bool) -> None:
    """The store's hook for a completed group (``envfarm.store.groups.Finalize``)."""
    assign_advantages(group, leave_one_out=leave_one_out)
