"""The Arrow page built from the stored packed copies holds what the JSON form holds: every
row's token arrays turn by turn (absent arrays as nulls, trajectories without turns as empty
lists), its head columns, and a body without the arrays."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from envfarm.api.arrow_page import page_arrow
from envfarm.api.encodings import packed_texts
from envfarm.models.jobs import GroupMeta, RawGroup, RawGroupPage
from envfarm.models.packing import packed_text


def trajectory(name: str, turns: list[dict[str, Any]], reward: float | None) -> str:
    value: dict[str, Any] = {"trajectory_id": name, "episode_id": f"ep-{name}", "turns": turns}
    value["reward"] = None if reward is None else {"value": reward, "valid": True}
    return json.dumps(value)


TURNS = [
    {"index": 0, "prompt_token_ids": [1, 2, 2**31 - 1], "completion_token_ids": [-5],
     "logprobs": [-0.5], "messages": [{"role": "user", "content": "hi"}]},
    {"index": 1, "prompt_suffix_ids": [9], "completion_token_ids": [], "logprobs": None},
]  # fmt: skip


def read(page: RawGroupPage) -> pa.Table:
    data = page_arrow(page, [packed_texts(group) for group in page.groups])
    return pa.ipc.open_stream(data).read_all()


def test_rows_carry_every_turns_arrays_and_nulls_where_a_turn_has_none() -> None:
    first = [trajectory("a", TURNS, 1.0), trajectory("b", [], None)]
    second = [trajectory("c", TURNS[:1], 0.0)]
    page = RawGroupPage(
        [
            RawGroup(GroupMeta(cursor=1, group_id="g1", task_id="t"), first,
                     [packed_text(text) for text in first]),
            RawGroup(GroupMeta(cursor=2, group_id="g2", task_id="t"), second),  # no packed copy
        ]
    )  # fmt: skip
    table = read(page).to_pydict()
    assert table["trajectory_id"] == ["a", "b", "c"]
    assert table["cursor"] == [1, 1, 2]
    assert table["reward"] == [1.0, None, 0.0]
    assert table["valid"] == [True, False, True]
    assert table["prompt_token_ids"] == [[[1, 2, 2**31 - 1], None], [], [[1, 2, 2**31 - 1]]]
    assert table["prompt_suffix_ids"] == [[None, [9]], [], [None]]
    assert table["completion_token_ids"] == [[[-5], []], [], [[-5]]]
    assert table["logprobs"] == [[[-0.5], None], [], [[-0.5]]]
    body = json.loads(table["body"][0])
    assert body["turns"][0] == {"index": 0, "messages": TURNS[0]["messages"]}
    assert json.loads(table["group"][2])["group_id"] == "g2"


def test_an_empty_page_is_an_empty_stream_with_the_schema() -> None:
    table = read(RawGroupPage([]))
    assert table.num_rows == 0
    assert table.schema.field("logprobs").type == pa.list_(pa.list_(pa.float32()))
