import statistics

import pytest

from envfarm.controller.groups import EPSILON, assign_advantages
from envfarm.models.trajectory import Provenance, Reward, Trajectory


def _traj(value: float | None, valid: bool = True) -> Trajectory:
    return Trajectory(
        trajectory_id="t",
        episode_id="e",
        job_id="j",
        group_id="g",
        task_id="x",
        reward=Reward(value=value, valid=valid),
        provenance=Provenance(task_hash="h", envfarm_version="0"),
    )


def test_group_relative_advantage_uses_population_std() -> None:
    group = [_traj(1.0), _traj(0.0), _traj(0.5), _traj(None, valid=False)]
    assign_advantages(group)
    rewards = [1.0, 0.0, 0.5]
    mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
    assert [t.advantage for t in group[:3]] == pytest.approx(
        [(r - mean) / (std + EPSILON) for r in rewards]
    )
    assert group[3].advantage is None
    assert all(t.group_zero_variance is False for t in group)


def test_zero_variance_group_gets_zero_and_is_marked() -> None:
    group = [_traj(1.0), _traj(1.0), _traj(1.0)]
    assign_advantages(group)
    assert [t.advantage for t in group] == [0.0, 0.0, 0.0]
    assert all(t.group_zero_variance for t in group)


def test_group_of_one_gets_null() -> None:
    group = [_traj(1.0)]
    assign_advantages(group)
    assert group[0].advantage is None
    assert group[0].group_zero_variance is None


def test_leave_one_out_baseline() -> None:
    group = [_traj(1.0), _traj(0.0), _traj(0.0)]
    assign_advantages(group, leave_one_out=True)
    std = statistics.pstdev([1.0, 0.0, 0.0])
    assert group[0].advantage == pytest.approx((1.0 - 0.0) / (std + EPSILON))
    assert group[1].advantage == pytest.approx((0.0 - 0.5) / (std + EPSILON))
