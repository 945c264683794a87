"""Merged training samples of whole trajectories (``envfarm run --samples``). No I/O.

A trainer that wants one sequence per trajectory rather than one per turn asks for
``merged_samples(trajectory)`` (docs/trajectory.md); ``samples_report`` says how many the
trajectories of a run gave, and why none when none did, so that ``--samples`` never leaves an
empty list unexplained. How turns merge, and the full and compact layouts of their prompts, live
in ``envfarm.models.token_layout``, which works on turns alone so that ``Trajectory.to_json``
can use it; ``expanded_turns`` is imported here because docs/trajectory.md names it here.
"""

from __future__ import annotations

from collections.abc import Sequence

from envfarm.models.token_layout import TrainingSample, expanded_turns, training_samples
from envfarm.models.trajectory import Trajectory

__all__ = ["expanded_turns", "merged_samples", "samples_report"]


def merged_samples(trajectory: Trajectory) -> list[TrainingSample]:
    """The trajectory's turns merged into as few training samples as the token data allows."""
    return training_samples(trajectory.turns)


def samples_report(trajectories: Sequence[Trajectory]) -> tuple[int, str | None]:
    """How many merged samples the trajectories give, and why none when none (for
    ``--samples``, which must not leave an empty list unexplained)."""
    built = sum(len(merged_samples(t)) for t in trajectories)
    if built:
        return built, None
    turns = [turn for t in trajectories for turn in t.turns]
    if not trajectories:
        return 0, "no episode ran"
    if not turns:
        return 0, "no episode has a model turn (every episode failed before or in its first call)"
    textual = sum(1 for turn in turns if turn.token_source in (None, "none"))
    if textual == len(turns):
        return 0, (
            "the server returned no token data on any turn (token_source none): it speaks "
            "plain OpenAI chat, or its profile was not detected; use --server-profile vllm, "
            "sglang or llamacpp, or --token-mode (docs/policies.md)"
        )
    faulty = sum(1 for turn in turns if turn.faults)
    return 0, (
        f"no turn has usable token data: {textual} of {len(turns)} turns have none and "
        f"{faulty} carry token-data faults (see turns[].faults)"
    )
