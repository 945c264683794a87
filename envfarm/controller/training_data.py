"""Settling a trajectory's training data once its episode has run.

Two things are decided here, after grading:

- ``policy_versions`` gets the min and max version over the turns (``versions.version_range``).
- A turn with a token-data *fault* (token data present but inconsistent: ids and logprobs of
  different lengths, a value that is not a number, a malformed routing array) makes the whole
  trajectory an infrastructure error: ``reward.valid`` false, ``value`` null, a
  ``token_data_fault`` flag and the reason, ``error.type == "TokenDataError"``. Why not only a
  flag on a valid reward: the reward would then be scored as a model outcome while the data to
  train it on is corrupt, and ``reward.valid`` is the one bit every trainer checks. An invalid
  reward is also left out of the group's advantages, so the other episodes of the group still
  count. The fault is the server's, not the model's, and repeats on a retry, so it is not
  retried.
- A turn whose token data was *absent* carries no fault: the client asked again once and,
  still without it, kept the turn with ``token_source: "none"`` and the reason
  (``envfarm.policy.reask``). Nothing in it is corrupt, only missing, so the reward stays valid;
  merged training samples split around the turn (``envfarm.models.samples``), so no token of
  unknown origin is trained on.
"""

from __future__ import annotations

from envfarm.controller.versions import PolicyVersionBoard, version_range
from envfarm.models.trajectory import ErrorInfo, Trajectory

TOKEN_FAULT_FLAG = "token_data_fault"


def settle_training_data(trajectory: Trajectory, board: PolicyVersionBoard | None = None) -> None:
    trajectory.policy_versions = version_range((t.policy_version for t in trajectory.turns), board)
    faults = [f"turn {t.index}: {fault}" for t in trajectory.turns for fault in t.faults]
    if not faults:
        return
    summary = "; ".join(faults[:3]) + (f" (and {len(faults) - 3} more)" if len(faults) > 3 else "")
    graded = trajectory.reward
    kept = ""
    if graded.valid and graded.value is not None:
        kept = f" (the verifier's reward {graded.value:g} is not used)"
    reason = f"the policy endpoint sent corrupt token data{kept}: {summary}"
    trajectory.reward = graded.model_copy(
        update={
            "value": None,
            "valid": False,
            "flags": [*graded.flags, TOKEN_FAULT_FLAG],
            "reason": reason,
        }
    )
    if trajectory.error is None:
        trajectory.error = ErrorInfo(
            type="TokenDataError",
            message=reason,
            phase="agent",
            infrastructure=True,
            retryable=False,
        )
