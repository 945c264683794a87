"""Compact encodings and compression over real HTTP: every form yields the same groups."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio

from envfarm.api import create_app
from envfarm.api.server import ApiServer
from envfarm.client import EnvfarmClient
from envfarm.client.encodings import decode_groups
from envfarm.client.http import group_spans
from tests.unit.api_double import MemoryService

JOB = {"tasks": ["alpha"], "policy": {"base_url": "oracle"}, "group_size": 2}
TURN = {"index": 0, "prompt_token_ids": [1, 2, 70000], "completion_token_ids": [5, -3],
        "logprobs": [-0.5, -0.25], "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
NEXT = {"index": 1, "prompt_token_ids": [1, 2, 70000, 5, -3, 9], "completion_token_ids": [7],
        "logprobs": [-1.0]}  # fmt: skip
"""Its prompt extends the first turn's prompt and completion: the compact forms send ``[9]``."""


@pytest_asyncio.fixture(loop_scope="session")
async def served() -> AsyncIterator[tuple[MemoryService, EnvfarmClient, str]]:
    service = MemoryService()
    async with (
        ApiServer(create_app(service, keepalive_s=0.2), graceful_s=1) as server,
        EnvfarmClient(server.url, retry_for_s=30) as client,
    ):
        yield service, client, server.url


async def job_with_tokens(service: MemoryService, client: EnvfarmClient, groups: int) -> str:
    job_id = await client.submit(JOB)
    for _ in range(groups):
        group = service.add_group(job_id)
        for trajectory in group.trajectories:
            trajectory["turns"] = [dict(TURN), dict(NEXT)]
    service.finish(job_id)
    return job_id


@pytest.mark.parametrize("encoding", ["json", "packed", "ndjson", "ndjson-packed", "arrow"])
@pytest.mark.parametrize("compression", [None, "gzip", "zstd"])
async def test_every_form_yields_the_json_groups_and_acks_them_all(
    served: tuple[MemoryService, EnvfarmClient, str], encoding: str, compression: str | None
) -> None:
    service, client, _ = served
    job_id = await job_with_tokens(service, client, 3)
    expected = [g async for g in client.groups(job_id, consumer="plain", ack=False)]
    got = [g async for g in client.lazy_groups(job_id, encoding=encoding, compression=compression)]
    assert [g.cursor for g in got] == [1, 2, 3]
    for lazy, plain in zip(got, expected, strict=True):
        assert [t.trajectory_id for t in lazy.trajectories] == [
            t["trajectory_id"] for t in plain.trajectories
        ]
        first = lazy.trajectories[0]
        assert first.reward["value"] == plain.trajectories[0]["reward"]["value"]
        compact = encoding not in ("json", "ndjson")
        prompts = [TURN["prompt_token_ids"], NEXT["prompt_token_ids"]]
        assert first.token_arrays("prompt_suffix_ids") == ([None, [9]] if compact else [None, None])
        assert first.token_arrays("prompt_token_ids") == prompts
        assert first.token_arrays("completion_token_ids") == [[5, -3], [7]]
        assert first.token_arrays("logprobs") == [[-0.5, -0.25], [-1.0]]
        ids = first.token_buffers("prompt_token_ids")
        logprobs = first.token_buffers("logprobs")[0]
        assert [view.tolist() if view else None for view in ids] == prompts
        assert logprobs is not None
        assert logprobs.tolist() == [-0.5, -0.25]
        assert ids[1] is not None
        assert (ids[1].format, logprobs.format) == (("i", "f") if compact else ("q", "d"))
        whole = first.to_dict()["turns"]
        assert whole[0]["messages"] == TURN["messages"]
        assert [(t["prompt_token_ids"], t["prompt_suffix_ids"]) for t in whole] == [
            (prompt, None) for prompt in prompts
        ]
    assert service.acked[(job_id, "default")] == 3


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("compression", [None, "gzip", "zstd"])
async def test_the_lazy_stream_yields_every_group(
    served: tuple[MemoryService, EnvfarmClient, str], compression: str | None, packed: bool
) -> None:
    service, client, _ = served
    job_id = await job_with_tokens(service, client, 4)
    got = [g async for g in client.lazy_stream(job_id, packed=packed, compression=compression)]
    assert [g.cursor for g in got] == [1, 2, 3, 4]
    assert got[0].trajectories[0].token_arrays("logprobs") == [[-0.5, -0.25], [-1.0]]
    last = got[3].trajectories[1]
    assert last.token_arrays("prompt_token_ids") == [[1, 2, 70000], [1, 2, 70000, 5, -3, 9]]
    assert last.token_arrays("prompt_suffix_ids") == [None, [9] if packed else None]
    assert service.acked[(job_id, "default")] == 4


async def test_the_default_lazy_form_is_packed_json_and_an_unknown_one_is_named(
    served: tuple[MemoryService, EnvfarmClient, str],
) -> None:
    service, client, _ = served
    job_id = await job_with_tokens(service, client, 2)
    got = [g async for g in client.lazy_groups(job_id, consumer="default-form")]
    buffers = got[1].trajectories[0].token_buffers("completion_token_ids")
    got_buffers = [(b.format, b.tolist()) for b in buffers if b is not None]
    assert got_buffers == [("i", [5, -3]), ("i", [7])]
    with pytest.raises(ValueError, match="'msgpack': expected one of json, packed"):
        async for _ in client.lazy_groups(job_id, encoding="msgpack"):
            pass


async def test_an_unknown_accept_is_a_406_and_gzip_is_announced(
    served: tuple[MemoryService, EnvfarmClient, str],
) -> None:
    service, client, url = served
    job_id = await job_with_tokens(service, client, 1)
    async with aiohttp.ClientSession() as http:
        target = f"{url}/v1/jobs/{job_id}/groups"
        async with http.get(target, headers={"Accept": "text/html"}) as answer:
            assert answer.status == 406
            assert (await answer.json())["type"] == "urn:envfarm:problem:not-acceptable"
        async with http.get(target, headers={"Accept-Encoding": "gzip"}) as answer:
            assert answer.headers["Content-Encoding"] == "gzip"
            assert answer.headers["Content-Type"].startswith("application/json")
            assert (await answer.json())["groups"][0]["cursor"] == 1


@pytest.mark.parametrize("accept", ["application/json", "application/json; arrays=packed"])
@pytest.mark.parametrize("accept_encoding", ["gzip", "identity"])
async def test_a_json_page_names_the_span_of_each_group_in_its_body(
    served: tuple[MemoryService, EnvfarmClient, str], accept: str, accept_encoding: str
) -> None:
    service, client, url = served
    job_id = await job_with_tokens(service, client, 3)
    async with aiohttp.ClientSession() as http:
        target = f"{url}/v1/jobs/{job_id}/groups"
        async with http.get(
            target, headers={"Accept": accept, "Accept-Encoding": accept_encoding}
        ) as answer:
            body = await answer.read()
            header = answer.headers["Envfarm-Group-Spans"]
            if accept_encoding == "identity":  # written a group at a time, under its length
                assert answer.headers["Content-Length"] == str(len(body))
                assert "Transfer-Encoding" not in answer.headers
        async with http.get(  # an empty page
            target, params={"after": "3"}, headers={"Accept-Encoding": accept_encoding}
        ) as answer:
            assert await answer.json() == {"groups": [], "next_cursor": None}
    spans = group_spans(header, body)
    assert len(spans) == 3
    whole = json.loads(body)["groups"]
    assert [json.loads(body[start:end]) for start, end in spans] == whole


PAGE = b'{"groups":[{"cursor":1},{"cursor":2}],"next_cursor":2}'


@pytest.mark.parametrize(
    "header",
    ["", "11-23", "11-23,24-37,38-40", "11-24,24-36", "12-23,24-36", "11-23,25-36", "a-b",
     "11-23,24-99", "24-36,11-23"],
)  # fmt: skip
def test_spans_that_do_not_fit_the_body_are_ignored(header: str) -> None:
    assert group_spans("11-23,24-36", PAGE) == ((11, 23), (24, 36))  # as the server writes them
    assert group_spans(header, PAGE) == ()


async def test_a_page_whose_spans_do_not_fit_is_parsed_whole(
    served: tuple[MemoryService, EnvfarmClient, str],
) -> None:
    service, client, _ = served
    job_id = await job_with_tokens(service, client, 2)
    expected = [g async for g in client.groups(job_id, consumer="spans", ack=False)]
    body = json.dumps({"groups": [g.model_dump(mode="json") for g in expected]}).encode()
    assert group_spans("0-5", body) == ()
    page = decode_groups("application/json", body, group_spans("0-5", body))
    assert [g.cursor for g in page] == [1, 2]
    assert [t.trajectory_id for t in page[1].trajectories] == [
        t["trajectory_id"] for t in expected[1].trajectories
    ]
