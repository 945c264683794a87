"""A trajectory's token data in its three layouts: full, compact and merged. Pure functions.

An agent's prompts are append-only while the chat template is: turn k's prompt is turn k-1's
prompt and completion followed by the tool results and the template's glue. Storing every full
prompt grows quadratically with turns, so turns are kept in a *compact* layout (a turn whose
prompt extends the previous context keeps only ``prompt_suffix_ids``) and materialized on
output: ``Trajectory.to_json()`` writes full prompts unless asked for the compact form.

``training_samples`` turns a trajectory's turns into training sequences: consecutive turns of
one context segment whose prompts each extend the previous prompt and completion become one
sample (``token_ids``, ``loss_mask``, ``logprobs``), so the shared prefix is trained on once. A
turn whose prompt does not extend (the template rewrote history, or a summary restarted the
context) starts a new sample; a turn without usable token data (text-only server, answers that
lacked it even when asked again, a recorded fault) ends the sample and is left out, since tokens
whose sampled origin cannot be proven are not trained on. Nothing is ever re-tokenized.

These work on turns alone, below the trajectory that holds them: ``Trajectory.to_json()`` lays
its turns out with them, and ``envfarm.models.samples`` gives whole trajectories' samples.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from envfarm.models.turn import Turn
from envfarm.models.wire import WireModel

T = TypeVar("T")


class TrainingSample(WireModel):
    """Consecutive turns of one context segment merged into one sequence (see
    ``envfarm.models.samples``): each turn's prompt extends the previous prompt and completion."""

    segment: int
    turns: list[int]
    """Indices of the turns merged into this sample, in order."""
    token_ids: list[int]
    loss_mask: list[int]
    """1 for tokens the policy sampled, 0 for prompt, template and tool-output tokens."""
    logprobs: list[float]
    """Sampling logprob of each sampled token; 0.0 where ``loss_mask`` is 0."""


def extends(prompt: Sequence[Any], context: Sequence[Any]) -> bool:
    """``prompt`` starts with ``context`` (the previous turn's prompt and completion)."""
    return len(prompt) >= len(context) and prompt[: len(context)] == context


class PromptCompactor:
    """Keeps turns compact as they are recorded: only the last context is held in full."""

    def __init__(self) -> None:
        self.context: list[int] | None = None
        """The previous turn's prompt followed by its completion (None when unknown)."""

    def add(self, turn: Turn) -> None:
        """Compact ``turn`` in place when its prompt extends the previous context."""
        prompt = turn.prompt_token_ids
        if prompt is None:
            if turn.prompt_suffix_ids is not None and self.context is not None:
                prompt = self.context + turn.prompt_suffix_ids
            else:
                self.context = None
                return
        elif self.context is not None and self.context and extends(prompt, self.context):
            turn.prompt_suffix_ids = prompt[len(self.context) :]
            turn.prompt_token_ids = None
        completion = turn.completion_token_ids
        self.context = None if completion is None else prompt + completion


def whole_prompts(
    prompts: Sequence[T | None],
    suffixes: Sequence[T | None],
    completions: Sequence[T | None],
    join: Callable[[T, T], T],
) -> list[T | None]:
    """Each turn's full prompt, of any array type ``join`` concatenates: its own, or (the
    compact layout) the turn before's prompt and completion followed by its suffix. A suffix
    with nothing before it to extend leaves the prompt None."""
    if all(suffix is None for suffix in suffixes):
        return list(prompts)
    whole: list[T | None] = []
    context: T | None = None
    for prompt, suffix, completion in zip(prompts, suffixes, completions, strict=False):
        if prompt is None and suffix is not None and context is not None:
            prompt = join(context, suffix)
        whole.append(prompt)
        context = None if prompt is None or completion is None else join(prompt, completion)
    return whole


def full_prompts(turns: Sequence[Turn]) -> Iterator[list[int] | None]:
    """Each turn's full prompt ids (None when the turn has none), whatever the layout."""
    prompts = whole_prompts(
        [turn.prompt_token_ids for turn in turns],
        [turn.prompt_suffix_ids for turn in turns],
        [turn.completion_token_ids for turn in turns],
        operator.add,
    )
    for turn, prompt in zip(turns, prompts, strict=True):
        if prompt is None and turn.prompt_suffix_ids is not None:
            raise ValueError(
                f"turn {turn.index} has prompt_suffix_ids but the previous turn has no "
                "prompt and completion ids to extend"
            )
        yield prompt


def expanded_turns(turns: Sequence[Turn]) -> list[Turn]:
    """Copies of ``turns`` in the full layout (every prompt whole, no suffixes)."""
    return [
        turn
        if turn.prompt_suffix_ids is None
        else turn.model_copy(update={"prompt_token_ids": prompt, "prompt_suffix_ids": None})
        for turn, prompt in zip(turns, full_prompts(turns), strict=True)
    ]


def compacted_turns(turns: Sequence[Turn]) -> list[Turn]:
    """Copies of ``turns`` in the compact layout."""
    compactor = PromptCompactor()
    out: list[Turn] = []
    for turn in turns:
        copy = turn.model_copy()
        compactor.add(copy)
        out.append(copy)
    return out


def _usable(turn: Turn, prompt: list[int] | None) -> bool:
    ids, logprobs = turn.completion_token_ids, turn.logprobs
    return (
        prompt is not None
        and ids is not None
        and logprobs is not None
        and len(ids) == len(logprobs)
        and not turn.faults
    )


def training_samples(turns: Sequence[Turn]) -> list[TrainingSample]:
    """``turns`` merged into as few training samples as their token data allows."""
    samples: list[TrainingSample] = []
    current: TrainingSample | None = None
    for turn, prompt in zip(turns, full_prompts(turns), strict=True):
        if prompt is None or not _usable(turn, prompt):
            current = None
            continue
        completion, logprobs = turn.completion_token_ids or [], turn.logprobs or []
        if (
            current is None
            or current.segment != turn.segment
            or not extends(prompt, current.token_ids)
        ):
            current = TrainingSample(
                segment=turn.segment, turns=[], token_ids=[], loss_mask=[], logprobs=[]
            )
            samples.append(current)
        added = prompt[len(current.token_ids) :]
        current.turns.append(turn.index)
        current.token_ids += added + completion
        current.loss_mask += [0] * len(added) + [1] * len(completion)
        current.logprobs += [0.0] * len(added) + list(logprobs)
    return samples
