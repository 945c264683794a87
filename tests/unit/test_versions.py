"""Policy version ordering, the trainer's version board, and settling a trajectory's data."""

from __future__ import annotations

import pytest

from envfarm.controller.training_data import TOKEN_FAULT_FLAG, settle_training_data
from envfarm.controller.versions import PolicyVersionBoard, version_range
from envfarm.models.trajectory import Provenance, Reward, Trajectory, Turn


def test_numeric_versions_order_numerically() -> None:
    span = version_range(["9", "10", None, "9.5", "2"])
    assert (span.min, span.max) == ("2", "10")


def test_named_versions_order_by_publication_not_by_name() -> None:
    board = PolicyVersionBoard()
    for version in ("step-b", "step-a", "step-c"):
        board.publish(version)
    assert board.current == board.latest() == "step-c"
    span = version_range(["step-c", "step-a", "step-b"], board)
    assert (span.min, span.max) == ("step-b", "step-c")


def test_republishing_keeps_the_first_place_and_moves_current() -> None:
    board = PolicyVersionBoard()
    for version in ("x", "y", "x"):
        board.publish(version)
    assert board.current == "x"
    span = version_range(["y", "x"], board)
    assert (span.min, span.max) == ("x", "y")


def test_unpublished_names_come_after_published_ones_in_order_of_appearance() -> None:
    board = PolicyVersionBoard()
    board.publish("b")
    span = version_range(["zeta", "b", "alpha"], board)
    assert (span.min, span.max) == ("b", "alpha")
    without_board = version_range(["zeta", "alpha", "zeta"])
    assert (without_board.min, without_board.max) == ("zeta", "alpha")


def test_no_versions_no_range() -> None:
    span = version_range([None, None])
    assert (span.min, span.max) == (None, None)


def test_an_empty_version_cannot_be_published() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        PolicyVersionBoard().publish("")


def graded(*turns: Turn) -> Trajectory:
    return Trajectory(
        trajectory_id="t",
        episode_id="e",
        job_id="j",
        group_id="g",
        task_id="x",
        turns=list(turns),
        reward=Reward(value=1.0, valid=True, components={"reward": 1.0}, reason="reward.json"),
        provenance=Provenance(task_hash="h", envfarm_version="0"),
    )


def test_settling_sets_the_version_range_and_keeps_a_clean_reward() -> None:
    traj = graded(Turn(index=0, policy_version="3"), Turn(index=1, policy_version="4"))
    settle_training_data(traj)
    assert (traj.policy_versions.min, traj.policy_versions.max) == ("3", "4")
    assert traj.reward.valid
    assert traj.reward.value == 1.0
    assert traj.error is None


def test_a_token_fault_invalidates_the_reward_as_an_infrastructure_error() -> None:
    fault = "vllm: 5 completion token ids but 4 logprobs: the token data cannot be aligned"
    traj = graded(Turn(index=0), Turn(index=1, faults=[fault]))
    settle_training_data(traj)
    assert traj.reward.valid is False
    assert traj.reward.value is None
    assert traj.reward.flags == [TOKEN_FAULT_FLAG]
    assert traj.reward.components == {"reward": 1.0}
    assert traj.reward.reason is not None
    assert f"turn 1: {fault}" in traj.reward.reason
    assert "reward 1 is not used" in traj.reward.reason
    assert traj.error is not None
    assert (traj.error.type, traj.error.phase) == ("TokenDataError", "agent")
    assert traj.error.infrastructure
    assert not traj.error.retryable
