"""The JSON form read lazily (simdjson) and parsed whole (orjson) gives the same group."""

from __future__ import annotations

import base64
import json
from array import array
from collections.abc import Callable
from typing import Any

import pytest

from envfarm.client.lazy import LazyGroup, parsed_group, simdjson_group
from envfarm.client.simdjson_pool import POOL_SIZE

TURNS = [
    {
        "index": 0,
        "prompt_token_ids": [1, 2, 151_000],
        "completion_token_ids": [7, 8],
        "logprobs": [-0.5, -0.25],
        "messages": [{"role": "user", "content": 'say "hi"\n'}],
    },
    {
        "index": 1,
        "prompt_suffix_ids": base64.b64encode(array("i", [9, 10]).tobytes()).decode(),
        "completion_token_ids": base64.b64encode(array("i", [11]).tobytes()).decode(),
        "logprobs": None,
    },
]


def group_bytes(cursor: int) -> bytes:
    trajectories = [
        {
            "trajectory_id": f"t{cursor}-{n}",
            "episode_id": f"e{cursor}-{n}",
            "reward": {"value": float(n), "valid": True},
            "turns": TURNS,
            "extra": {"nested": [1, {"deep": True}]},
        }
        for n in range(2)
    ]
    meta = {"cursor": cursor, "group_id": f"g{cursor}", "task_id": "t", "stale": False}
    return json.dumps({**meta, "trajectories": trajectories}).encode()


def parsed_whole(data: bytes) -> LazyGroup:
    return parsed_group(json.loads(data))


READERS: dict[str, Callable[[bytes], LazyGroup]] = {
    "simdjson": simdjson_group,
    "parsed whole": parsed_whole,
}


@pytest.mark.parametrize("reader", READERS)
def test_both_readers_give_the_same_ids_rewards_arrays_and_bodies(reader: str) -> None:
    group = READERS[reader](group_bytes(3))
    assert (group.cursor, group.meta.group_id) == (3, "g3")
    first, second = group.trajectories
    assert (first.trajectory_id, first.episode_id) == ("t3-0", "e3-0")
    assert second.reward == {"value": 1.0, "valid": True}
    assert first.token_arrays("completion_token_ids") == [[7, 8], [11]]
    assert first.token_arrays("prompt_suffix_ids") == [None, [9, 10]]
    assert first.token_arrays("logprobs") == [[-0.5, -0.25], None]
    views = first.token_buffers("completion_token_ids")
    assert [(v.format, v.tolist()) for v in views if v is not None] == [("q", [7, 8]), ("i", [11])]
    assert [v and v.tolist() for v in first.token_buffers("logprobs")] == [[-0.5, -0.25], None]
    whole = [[1, 2, 151_000], [1, 2, 151_000, 7, 8, 9, 10]]  # the suffix after turn 0's context
    assert first.token_arrays("prompt_token_ids") == whole
    assert [v and v.tolist() for v in first.token_buffers("prompt_token_ids")] == whole
    body: dict[str, Any] = first.to_dict()
    assert body["turns"][0]["messages"][0]["content"] == 'say "hi"\n'
    assert body["turns"][1]["completion_token_ids"] == [11]
    assert body["extra"] == {"nested": [1, {"deep": True}]}


def test_a_group_kept_after_the_next_one_is_read_stays_readable() -> None:
    cursors = range(1, POOL_SIZE + 4)  # more groups held than the pool keeps parsers
    kept = [simdjson_group(group_bytes(cursor)) for cursor in cursors]
    assert [g.trajectories[1].token_arrays("prompt_token_ids")[0] for g in kept] == [
        [1, 2, 151_000]
    ] * len(cursors)
    assert [g.trajectories[0].to_dict()["trajectory_id"] for g in kept] == [
        f"t{cursor}-0" for cursor in cursors
    ]
    del kept[1::2]  # the parsers of the groups let go are reused by the next ones
    again = [simdjson_group(group_bytes(cursor)) for cursor in (20, 21, 22)]
    assert [g.trajectories[0].trajectory_id for g in kept + again] == [
        f"t{cursor}-0" for cursor in [*cursors[::2], 20, 21, 22]
    ]
    assert kept[0].trajectories[0].token_arrays("completion_token_ids") == [[7, 8], [11]]


def packed(values: list[int]) -> str:
    return base64.b64encode(array("i", values).tobytes()).decode()


def test_packed_copies_with_every_prompt_whole_are_read_as_they_are() -> None:
    """Copies made before the packed forms were compact keep every prompt whole."""
    turns = [
        {"index": 0, "prompt_token_ids": packed([1, 2]), "completion_token_ids": packed([3])},
        {"index": 1, "prompt_token_ids": packed([1, 2, 3, 4]), "prompt_suffix_ids": None,
         "completion_token_ids": packed([5])},
    ]  # fmt: skip
    body = {"trajectory_id": "t", "episode_id": "e", "reward": None, "turns": turns}
    data = json.dumps({"cursor": 1, "group_id": "g", "task_id": "t", "trajectories": [body]})
    for reader in READERS.values():
        (trajectory,) = reader(data.encode()).trajectories
        assert trajectory.token_arrays("prompt_token_ids") == [[1, 2], [1, 2, 3, 4]]
        views = trajectory.token_buffers("prompt_token_ids")
        assert [v and (v.format, v.tolist()) for v in views] == [("i", [1, 2]), ("i", [1, 2, 3, 4])]
        assert [t["prompt_suffix_ids"] for t in trajectory.to_dict()["turns"]] == [None, None]
