"""The viewer in headless Chromium against real runs: `envfarm run` on an example task with
the oracle, and with a scripted policy that plants a reward file (a flagged episode) and prints
a long output; then `envfarm view` on both run directories, as a user would open them."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.sync_api import Page, expect

from envfarm.policy import PolicyServer
from envfarm.testing.scripted import ScriptedResponder, Step, completion, tool_call
from tests.browser.conftest import REPO, Offline, served_viewer

pytestmark = pytest.mark.docker
TASK = "tasks/word-count-cli"


async def envfarm_run(*args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "envfarm", "run", *args, cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 1800)
    assert proc.returncode in (0, 1), (out + err).decode()[-3000:]


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("viewer-runs")
    oracle, scripted = root / "oracle", root / "scripted"
    await envfarm_run(TASK, "--policy", "oracle", "--group-size", "2", "--out", str(oracle))
    steps: list[Step] = [
        completion("Let me look around first.", tool_call("bash", {"command": "seq 1 400"})),
        tool_call(
            "bash", {"command": "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt"}
        ),
        tool_call("submit", {}),
        tool_call("submit", {}),  # the second episode of the group gives up at once
    ]
    async with PolicyServer(ScriptedResponder(steps)) as server:
        await envfarm_run(
            TASK, "--policy", server.base_url, "--model", "scripted", "--group-size", "2",
            "--concurrency", "1", "--out", str(scripted),
        )  # fmt: skip
    return oracle, scripted


@pytest.fixture(scope="module")
def viewer(runs: tuple[Path, Path]) -> Iterator[str]:
    with served_viewer(*runs) as url:
        yield url


def test_open_a_run_filter_to_the_flagged_episode_and_read_it(
    viewer: str, page: Page, offline: Offline, shots: Path
) -> None:
    page.goto(viewer)
    expect(page.locator("a.run")).to_have_count(2)
    page.screenshot(path=shots / "runs.png", full_page=True)

    page.get_by_role("link", name="scripted").click()
    expect(page.locator("h1")).to_have_text("scripted")
    expect(page.locator("table.episodes a.trajectory")).to_have_count(2)
    page.get_by_label("flagged").check()
    page.get_by_role("button", name="filter").click()
    expect(page).to_have_url(re.compile(r"flagged=1"))
    rows = page.locator("table.episodes tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("tamper:reward_file_planted")
    page.screenshot(path=shots / "run.png", full_page=True)

    rows.first.locator("a.trajectory").click()
    page.screenshot(path=shots / "trajectory.png")
    expect(page.locator("#reward")).to_contain_text("tamper:reward_file_planted")
    expect(page.locator("#reward")).to_contain_text("/logs/verifier/reward.txt")  # evidence
    expect(page.locator("#turn-0")).to_contain_text("seq 1 400")
    fold = page.locator("#turn-0 .tool-output details")
    expect(fold.locator("summary")).to_contain_text(re.compile(r"tool output: 40\d lines"))
    full = fold.locator("pre")
    expect(full).to_be_hidden()
    fold.locator("summary").click()
    expect(full).to_be_visible()
    expect(full).to_contain_text("\n400")  # the whole output, never cut
    page.locator("#turn-0").scroll_into_view_if_needed()
    page.screenshot(path=shots / "tool-output.png")
    expect(page.locator("#artifacts")).to_contain_text("verifier output")

    page.goto(page.url.split("#")[0] + "#turn-2")
    expect(page.locator("#turn-2")).to_contain_text("submit")
    assert page.evaluate("document.querySelector(':target').id") == "turn-2"

    page.locator("header nav a", has_text="group").click()
    expect(page.locator("article.card")).to_have_count(2)
    expect(page.locator("article.card.flagged")).to_have_count(1)
    page.screenshot(path=shots / "group.png", full_page=True)
    assert offline.attempts == []


def test_the_oracle_run_shows_task_figures_and_charts(
    viewer: str, page: Page, offline: Offline, shots: Path, runs: tuple[Path, Path]
) -> None:
    summary = json.loads((runs[0] / "summary.json").read_text())
    page.goto(viewer + "runs/oracle")
    table = page.locator("table.tasks")
    expect(table).to_contain_text("envfarm/word-count-cli")
    expect(table).to_contain_text("pass@2")
    expect(page.locator("svg[aria-label='reward histogram']")).to_be_visible()
    expect(page.locator("svg[aria-label='time per phase']")).to_be_visible()
    assert summary["mean_reward"] == 1.0
    expect(page.locator(".figures")).to_contain_text("completed")
    assert offline.attempts == []
