"""A multi-step trajectory in headless Chromium: `envfarm run` of the Harbor multi-step fixture
with the oracle, then `envfarm view` on it; the steps table leads to each step's turns."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import REPO, Offline, served_viewer

pytestmark = pytest.mark.docker
FIXTURE = "tests/fixtures/harbor-steps"


@pytest.fixture(scope="module")
def viewer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    out = tmp_path_factory.mktemp("viewer-steps") / "steps"
    done = subprocess.run(
        [sys.executable, "-m", "envfarm", "run", FIXTURE, "--policy", "oracle", "--out", str(out)],
        capture_output=True, text=True, cwd=REPO, timeout=1800, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    with served_viewer(out) as url:
        yield url


def test_the_steps_table_leads_to_each_steps_turns(
    viewer: str, page: Page, offline: Offline, shots: Path
) -> None:
    page.goto(viewer + "runs/steps")
    page.locator("table.episodes a.trajectory").first.click()
    rows = page.locator("#steps table.steps tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_contain_text("create")
    expect(rows.nth(1)).to_contain_text("2..3 (2)")
    expect(rows.nth(2)).to_contain_text("submitted")
    expect(page.locator("nav.turn-index")).to_contain_text("extend: 2 3")
    page.screenshot(path=shots / "trajectory-steps.png")

    rows.nth(1).get_by_role("link", name="extend").click()
    expect(page).to_have_url(re.compile(r"#step-1$"))
    band = page.locator("#step-1")
    expect(band).to_be_in_viewport()
    expect(band).to_contain_text("step 1: extend")
    expect(band).to_contain_text("reward 1")
    assert page.evaluate("document.querySelector(':target').id") == "step-1"
    expect(page.locator("#turn-2 .meta").first).to_contain_text("step extend")
    page.screenshot(path=shots / "step-band.png")
    assert offline.attempts == []
