"""The viewer's pages over real HTTP on loopback, on runs built with the models."""

from __future__ import annotations

import random
import re
from collections.abc import AsyncIterator
from html import unescape
from pathlib import Path

import aiohttp
import pytest

from envfarm.api.server import ApiServer
from envfarm.models.trajectory import Reward, StepResult
from envfarm.testing.runs import synthetic_trajectory, write_synthetic_run
from envfarm.viewer import DirCatalog, create_viewer

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def fetch(base: str, path: str) -> tuple[int, str, dict[str, str]]:
    async with aiohttp.ClientSession() as session, session.get(base + path) as response:
        return response.status, await response.text(), dict(response.headers)


def hostile_run(root: Path) -> Path:
    """One flagged episode whose tool output is long and holds markup, with artifacts."""
    run = root / "hostile"
    write_synthetic_run(run, 6, group_size=3, tokens=True)
    trajectory = synthetic_trajectory(
        random.Random(3), job_id="job-hostile", group_id="grp-h", task_id="evil", number=7,
        reward=1.0, flagged=True, tokens=True, turns=3,
    )  # fmt: skip
    long_output = "\n".join(f"row {i}" for i in range(500)) + "\n<script>alert(1)</script> END"
    trajectory.turns[0].tool_results[0].output = long_output
    trajectory.artifacts = "artifacts/ep-h"
    (run / "artifacts" / "ep-h" / "workspace").mkdir(parents=True)
    (run / "artifacts" / "ep-h" / "workspace" / "diff.patch").write_text("+added line\n")
    (run / "artifacts" / "ep-h" / "verifier").mkdir()
    (run / "artifacts" / "ep-h" / "verifier" / "test-stdout.txt").write_text("1 passed\n")
    escaping = synthetic_trajectory(
        random.Random(4), job_id="job-hostile", group_id="grp-x", task_id="evil", number=8,
        reward=0.0,
    )  # fmt: skip
    escaping.artifacts = "../../etc"
    broken = synthetic_trajectory(
        random.Random(5), job_id="job-hostile", group_id="grp-z", task_id="infra", number=10,
        reward=None,
    )  # fmt: skip
    with (run / "trajectories.jsonl").open("a") as lines:
        for line in (trajectory, escaping, broken):
            lines.write(line.to_json() + "\n")
    return run


@pytest.fixture
async def viewer(tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    run = hostile_run(tmp_path)
    other = tmp_path / "second"
    write_synthetic_run(other, 30, group_size=5)
    async with ApiServer(create_viewer(DirCatalog([run, other]))) as server:
        yield server.url, run


async def test_the_runs_page_lists_every_run_with_its_figures(viewer: tuple[str, Path]) -> None:
    url, _ = viewer
    status, html, headers = await fetch(url, "/")
    assert status == 200
    assert "script-src" not in headers["Content-Security-Policy"]
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert 'href="/runs/hostile"' in html
    assert 'href="/runs/second"' in html
    assert "running" in html  # no summary.json: still being written, as far as anyone knows


async def test_filters_narrow_the_episodes_and_the_task_table_has_pass_at_k(
    viewer: tuple[str, Path],
) -> None:
    url, _ = viewer
    _, html, _ = await fetch(url, "/runs/hostile")
    assert "pass@1" in html
    assert "pass@2" in html
    assert html.count('class="trajectory"') == 9
    _, flagged, _ = await fetch(url, "/runs/hostile?flagged=1")
    ids = re.findall(r'class="trajectory" href="/runs/hostile/t/([^"]+)"', flagged)
    assert "ep-tile-000007-a0" in ids
    assert "tamper:tests_modified" in flagged
    _, by_task, _ = await fetch(url, "/runs/hostile?task=evil")
    assert by_task.count('class="trajectory"') == 2
    _, invalid, _ = await fetch(url, "/runs/hostile?invalid=1&outcome=invalid")
    rows = invalid.split('class="episodes"')[1].split("<tr>")[2:]
    assert len(rows) == 1
    assert '<span class="invalid">invalid</span>' in rows[0]
    assert "SandboxDied" in rows[0]
    assert "<svg" in html
    assert "reward histogram" in html


async def test_the_trajectory_page_shows_everything_escaped_and_folded_not_cut(
    viewer: tuple[str, Path],
) -> None:
    url, _ = viewer
    status, html, _ = await fetch(url, "/runs/hostile/t/ep-tile-000007-a0")
    assert status == 200
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; END" in html  # the whole output, escaped
    assert "row 499" in html
    assert re.search(r"<details class=\"fold\"><summary>tool output: 501 lines", html)
    for anchor in ('id="turn-0"', 'id="turn-1"', 'id="turn-2"', 'href="#turn-2"'):
        assert anchor in html
    assert "/tests/test_outputs.py" in html  # the flag's evidence
    assert "+added line" in html
    assert "1 passed" in html
    assert 'class="tok lp' in html  # token view coloured by logprob, shown as ids
    assert "policy version <strong>1</strong>" in html


async def test_artifacts_outside_the_run_are_not_followed(viewer: tuple[str, Path]) -> None:
    url, _ = viewer
    _, html, _ = await fetch(url, "/runs/hostile/t/ep-tile-000008-a0")
    assert "../../etc is not in this run directory" in unescape(html)


async def test_summaries_and_segments_appear_in_the_session(viewer: tuple[str, Path]) -> None:
    url, _ = viewer
    _, html, _ = await fetch(url, "/runs/second/t/ep-etic-000003-a0")
    assert 'id="segment-1"' in html
    assert "I read the files; next I submit." in html
    assert '<span class="chip">summary</span>' in html


async def test_a_group_shows_its_trajectories_side_by_side(viewer: tuple[str, Path]) -> None:
    url, _ = viewer
    status, html, _ = await fetch(url, "/runs/second/groups/grp-000001")
    assert status == 200
    assert html.count('<article class="card') == 5
    assert "advantage" in html


async def test_unknown_runs_and_trajectories_are_404_pages(viewer: tuple[str, Path]) -> None:
    url, _ = viewer
    assert (await fetch(url, "/runs/nope"))[0] == 404
    status, html, _ = await fetch(url, "/runs/second/t/nope")
    assert status == 404
    assert "no trajectory nope in second" in html


async def test_the_page_follows_a_growing_run(viewer: tuple[str, Path]) -> None:
    url, run = viewer
    _, before, _ = await fetch(url, "/runs/hostile")
    extra = synthetic_trajectory(
        random.Random(5),
        job_id="job-hostile",
        group_id="grp-y",
        task_id="late",
        number=9,
        reward=1.0,
    )
    with (run / "trajectories.jsonl").open("a") as lines:
        lines.write(extra.to_json() + "\n" + extra.to_json()[:50])
    _, after, _ = await fetch(url, "/runs/hostile?refresh=5")
    assert "late" not in before
    assert "late" in after
    assert "has no newline yet" in after
    assert '<meta http-equiv="refresh" content="5">' in after


async def test_a_multi_step_trajectory_shows_its_steps_and_marks_their_turns(
    tmp_path: Path,
) -> None:
    run = tmp_path / "steps"
    run.mkdir()
    trajectory = synthetic_trajectory(
        random.Random(6), job_id="job-steps", group_id="grp-s", task_id="staged", number=1,
        reward=0.5, turns=5,
    )  # fmt: skip
    trajectory.messages.insert(6, {"role": "user", "content": "Now extend the stack."})
    trajectory.steps = [
        StepResult(name="create", reward=Reward(value=1.0, valid=True, reason="reward.txt"),
                   first_turn=0, last_turn=1, stop_reason="submitted"),
        StepResult(name="extend", reward=Reward(value=0.0, valid=True, reason="reward.txt"),
                   first_turn=2, last_turn=4, stop_reason="max_turns"),
        StepResult(name="report", reward=Reward(reason="workdir/setup.sh exited 3")),
    ]  # fmt: skip
    (run / "trajectories.jsonl").write_text(trajectory.to_json() + "\n")
    async with ApiServer(create_viewer(DirCatalog([run]))) as server:
        status, html, _ = await fetch(server.url, "/runs/steps/t/ep-teps-000001-a0")
    assert status == 200
    table = html[html.index('<section id="steps">') :]
    table = table[: table.index("</section>")]
    rows = [re.sub(r"<[^>]+>", "", row) for row in table.split("<tr>")[2:]]
    assert rows == [
        "create10..1 (2)submittedreward.txt",
        "extend02..4 (3)max_turnsreward.txt",
        "reportinvalidno model callnot run (its setup failed)workdir/setup.sh exited 3",
    ]
    assert '<a href="#step-1">extend</a>' in table
    order = [
        html.index(mark)
        for mark in ('id="step-0"', 'id="turn-0"', 'id="turn-1"', 'id="step-1"',
                     "Now extend the stack.", 'id="turn-2"', 'id="turn-4"')
    ]  # fmt: skip
    assert order == sorted(order)
    assert 'id="step-2"' not in html  # no turns, so no band: the table says so
    band = html[html.index('id="step-1"') : html.index("Now extend the stack.")]
    assert "step 1: extend" in band
    assert "<strong>0</strong>" in band
    index = html[html.index('<nav class="turn-index steps"') :]
    index = re.sub(r"<[^>]+>", "", index[: index.index("</nav>")])
    assert index == "turns by stepcreate: 0 1extend: 2 3 4report: no turns"
    turn = html[html.index('id="turn-3"') :]
    assert 'step <a href="#step-1">extend</a>' in turn[: turn.index("</p>")]
