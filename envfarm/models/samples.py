"""Token layouts of a trajectory and merged training samples. Pure functions, no I/O.

An agent's prompts are append-only while the chat template is: turn k's prompt is turn k-1's
prompt and completion followed by the tool results and the template's glue. Storing every full
prompt grows quadratically with turns, so turns are kept in a *compact* layout (a turn whose
prompt extends the previous context keeps only ``prompt_suffix_ids``) and materialized on
output: ``Trajectory.to_json()`` writes full prompts unless asked for the compact form.

``merged_samples`` turns a trajectory into training sequences: consecutive turns of one
context segment whose prompts each extend the previous prompt and completion become one sample
(``token_ids``, ``loss_mask``, ``logprobs``), so the shared prefix is trained on once. A turn
whose prompt does not extend (the template rewrote history, or a summary restarted the context)
starts a new sample; a turn without usable token data (text-only server, answers that lacked
it even when asked again, a recorded fault) ends the sample and is left out, since tokens whose
sampled origin cannot be proven are not trained on. Nothing is ever re-tokenized.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from envfarm.models.trajectory import TrainingSample, Trajectory, Turn

T = TypeVar("T")


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


def merged_samples(trajectory: Trajectory) -> list[TrainingSample]:
    """The trajectory's turns merged into as few training samples as the token data allows."""
    samples: list[TrainingSample] = []
    current: TrainingSample | None = None
    for turn, prompt in zip(trajectory.turns, full_prompts(trajectory.turns), strict=True):
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


def output_form(trajectory: Trajectory, *, compact_tokens: bool, samples: bool) -> Trajectory:
    """The trajectory as it is written out (see ``Trajectory.to_json``)."""
    turns = (
        compacted_turns(trajectory.turns) if compact_tokens else expanded_turns(trajectory.turns)
    )
    update: dict[str, object] = {"turns": turns}
    if samples:
        update["samples"] = merged_samples(trajectory)
    return trajectory.model_copy(update=update)


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
