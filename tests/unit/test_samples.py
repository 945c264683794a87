"""Merged training samples and the compact token layout (pure functions)."""

from __future__ import annotations

import json

import pytest

from envfarm.client.token_arrays import unpack
from envfarm.models.packing import packed_trajectory
from envfarm.models.samples import expanded_turns, merged_samples
from envfarm.models.token_layout import PromptCompactor, compacted_turns, full_prompts
from envfarm.models.trajectory import Provenance, Trajectory, Turn


def turn(
    index: int,
    prompt: list[int] | None,
    completion: list[int] | None,
    *,
    segment: int = 0,
    faults: list[str] | None = None,
    logprobs: list[float] | None = None,
) -> Turn:
    if logprobs is None and completion is not None:
        logprobs = [-(i + 1) / 10 for i in range(len(completion))]
    return Turn(
        index=index,
        segment=segment,
        prompt_token_ids=prompt,
        completion_token_ids=completion,
        logprobs=logprobs,
        faults=faults or [],
    )


def trajectory(*turns: Turn) -> Trajectory:
    return Trajectory(
        trajectory_id="t",
        episode_id="e",
        job_id="j",
        group_id="g",
        task_id="x",
        turns=list(turns),
        provenance=Provenance(task_hash="h", envfarm_version="0"),
    )


def test_turns_that_extend_merge_into_one_sample_with_exact_masks() -> None:
    traj = trajectory(
        turn(0, [1, 2, 3], [10, 11]),
        turn(1, [1, 2, 3, 10, 11, 4, 5], [12]),
        turn(2, [1, 2, 3, 10, 11, 4, 5, 12, 6], [13, 14, 15]),
    )
    (sample,) = merged_samples(traj)
    assert sample.turns == [0, 1, 2]
    assert sample.token_ids == [1, 2, 3, 10, 11, 4, 5, 12, 6, 13, 14, 15]
    assert sample.loss_mask == [0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1]
    assert sample.logprobs == [0, 0, 0, -0.1, -0.2, 0, 0, -0.1, 0, -0.1, -0.2, -0.3]
    sampled = [t for t, m in zip(sample.token_ids, sample.loss_mask, strict=True) if m]
    assert sampled == [10, 11, 12, 13, 14, 15]


def test_a_prompt_that_rewrites_history_starts_a_new_sample() -> None:
    traj = trajectory(
        turn(0, [1, 2], [10, 11]),
        turn(1, [1, 2, 99, 4], [12]),  # the template dropped turn 0's completion
        turn(2, [1, 2, 99, 4, 12, 5], [13]),
    )
    first, second = merged_samples(traj)
    assert (first.turns, first.token_ids, first.loss_mask) == ([0], [1, 2, 10, 11], [0, 0, 1, 1])
    assert second.turns == [1, 2]
    assert second.token_ids == [1, 2, 99, 4, 12, 5, 13]
    assert second.loss_mask == [0, 0, 0, 0, 1, 0, 1]


def test_a_new_segment_starts_a_new_sample_even_when_ids_extend() -> None:
    traj = trajectory(
        turn(0, [1], [2]),
        turn(1, [1, 2, 3], [4], segment=1),
        turn(2, [1, 2, 3, 4, 5], [6], segment=1),
    )
    samples = merged_samples(traj)
    assert [(s.segment, s.turns) for s in samples] == [(0, [0]), (1, [1, 2])]
    assert samples[1].token_ids == [1, 2, 3, 4, 5, 6]
    assert samples[1].loss_mask == [0, 0, 0, 1, 0, 1]


@pytest.mark.parametrize(
    "bad",
    [
        turn(1, [1, 2, 3], [4], faults=["vllm: 1 completion token ids but 0 logprobs"]),
        turn(1, None, None),
        turn(1, [1, 2, 3], [4], logprobs=[]),
    ],
)
def test_a_turn_without_usable_token_data_ends_the_sample_and_is_left_out(bad: Turn) -> None:
    traj = trajectory(turn(0, [1], [2]), bad, turn(2, [1, 2, 3, 4, 5], [6]))
    samples = merged_samples(traj)
    assert [s.turns for s in samples] == [[0], [2]]
    assert samples[1].loss_mask == [0, 0, 0, 0, 0, 1]  # turn 1's tokens are context only


def test_no_token_data_no_samples() -> None:
    assert merged_samples(trajectory(turn(0, None, None), turn(1, None, None))) == []


def test_compactor_keeps_only_the_suffix_of_extending_prompts() -> None:
    turns = [
        turn(0, [1, 2, 3], [10, 11]),
        turn(1, [1, 2, 3, 10, 11, 4], [12]),
        turn(2, [7, 8], [13]),  # a restarted context is kept whole
        turn(3, [7, 8, 13, 9], None),
        turn(4, [7, 8, 13, 9, 1], [14]),  # previous turn had no completion: kept whole
    ]
    compactor = PromptCompactor()
    for t in turns:
        compactor.add(t)
    assert [(t.prompt_token_ids, t.prompt_suffix_ids) for t in turns] == [
        ([1, 2, 3], None),
        (None, [4]),
        ([7, 8], None),
        (None, [9]),
        ([7, 8, 13, 9, 1], None),
    ]
    assert list(full_prompts(turns)) == [
        [1, 2, 3],
        [1, 2, 3, 10, 11, 4],
        [7, 8],
        [7, 8, 13, 9],
        [7, 8, 13, 9, 1],
    ]
    assert compactor.context == [7, 8, 13, 9, 1, 14]


def test_layouts_round_trip_and_samples_do_not_depend_on_the_layout() -> None:
    full = [
        turn(0, [1, 2], [3]),
        turn(1, [1, 2, 3, 4], [5, 6]),
        turn(2, [1, 2, 3, 4, 5, 6, 7], [8]),
    ]
    compact = compacted_turns(full)
    assert [t.prompt_suffix_ids for t in compact] == [None, [4], [7]]
    assert [t.prompt_token_ids for t in full] == [[1, 2], [1, 2, 3, 4], [1, 2, 3, 4, 5, 6, 7]]
    assert expanded_turns(compact) == full
    assert merged_samples(trajectory(*compact)) == merged_samples(trajectory(*full))


def test_to_json_materializes_full_prompts_by_default() -> None:
    traj = trajectory(*compacted_turns([turn(0, [1, 2], [3]), turn(1, [1, 2, 3, 4], [5])]))
    full = json.loads(traj.to_json())
    assert [t["prompt_token_ids"] for t in full["turns"]] == [[1, 2], [1, 2, 3, 4]]
    assert [t["prompt_suffix_ids"] for t in full["turns"]] == [None, None]
    assert full["samples"] is None
    compact = json.loads(traj.to_json(compact_tokens=True, samples=True))
    assert [t["prompt_token_ids"] for t in compact["turns"]] == [[1, 2], None]
    assert [t["prompt_suffix_ids"] for t in compact["turns"]] == [None, [4]]
    assert compact["samples"] == [
        {
            "segment": 0,
            "turns": [0, 1],
            "token_ids": [1, 2, 3, 4, 5],
            "loss_mask": [0, 0, 1, 0, 1],
            "logprobs": [0.0, 0.0, -0.1, 0.0, -0.1],
        }
    ]
    assert Trajectory.model_validate_json(traj.to_json(compact_tokens=True)).turns == traj.turns


def test_a_dangling_suffix_is_a_clear_error() -> None:
    bad = Turn(index=0, prompt_suffix_ids=[1])
    with pytest.raises(ValueError, match="turn 0 has prompt_suffix_ids"):
        list(full_prompts([bad]))


@pytest.mark.parametrize(
    "turns",
    [
        [([1, 2], [3]), ([1, 2, 3, 4], [5]), ([1, 2, 3, 4, 5, 6], [7])],
        [([1, 2], [3]), ([9, 1, 2, 3], [5]), ([9, 1, 2, 3, 5, 6], None), ([9], [1])],
        [([1], None), ([1, 2], [3]), (None, [4]), ([1, 2, 3, 4], [5])],
    ],
    ids=["extending", "history rewritten, completion missing", "no ids on some turns"],
)
def test_the_packed_form_has_the_compact_layout_of_the_models(
    turns: list[tuple[list[int] | None, list[int] | None]],
) -> None:
    traj = trajectory(*(turn(i, prompt, done) for i, (prompt, done) in enumerate(turns)))
    packed = packed_trajectory(traj.to_json())
    compact = json.loads(traj.to_json(compact_tokens=True))
    for name in ("prompt_token_ids", "prompt_suffix_ids", "completion_token_ids"):
        got = [unpack(t[name], "i") for t in packed["turns"]]
        assert got == [t[name] for t in compact["turns"]]
    assert packed_trajectory(traj.to_json(compact_tokens=True)) == packed  # already compact
