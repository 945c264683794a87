"""`envfarm serve` in headless Chromium: log in at /ui/login, read /docs (Swagger UI from the
package's own assets, with every non-loopback request refused), and browse a finished job."""

from __future__ import annotations

import json
import shutil
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import REPO, Offline
from tests.integration.serve_process import ServeProcess

pytestmark = pytest.mark.docker
TOKEN = "browser-serve-token-51d0"
TASK = "word-count-cli"


def api(url: str, method: str = "GET", body: dict[str, Any] | None = None) -> dict[str, Any]:
    request = urllib.request.Request(
        url, method=method, data=json.dumps(body).encode() if body else None,
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=60) as response:
        result: dict[str, Any] = json.loads(response.read())
        return result


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServeProcess, str]]:
    workdir = tmp_path_factory.mktemp("serve-ui")
    shutil.copytree(REPO / "tasks" / TASK, workdir / "tasks" / TASK)
    server = ServeProcess(workdir, "--tasks", "tasks", "--data-dir", "data", token=TOKEN)
    server.start()
    try:
        job = {"tasks": [f"envfarm/{TASK}"], "policy": {"base_url": "oracle"}, "group_size": 2,
               "name": "browser oracle"}  # fmt: skip
        job_id = api(server.url + "/v1/jobs", "POST", job)["id"]
        deadline = time.monotonic() + 900
        while api(f"{server.url}/v1/jobs/{job_id}")["status"] not in ("completed", "failed"):
            assert time.monotonic() < deadline, server.output()
            time.sleep(1)
        yield server, job_id
        assert server.stop(signal.SIGTERM) == 0, server.output()
    finally:
        server.kill()


def test_docs_render_offline_after_logging_in(
    served: tuple[ServeProcess, str], page: Page, offline: Offline, shots: Path
) -> None:
    server, _ = served
    page.goto(server.url + "/docs")
    expect(page).to_have_url(server.url + "/ui/login?next=/docs")
    page.get_by_label("API token").fill("wrong")
    page.get_by_role("button", name="log in").click()
    expect(page.locator(".invalid")).to_have_text("that token is wrong")
    page.get_by_label("API token").fill(TOKEN)
    page.get_by_role("button", name="log in").click()
    expect(page).to_have_url(server.url + "/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("envfarm")
    expect(page.locator(".opblock-summary-path", has_text="/v1/jobs").first).to_be_visible()
    page.screenshot(path=shots / "docs.png", full_page=False)
    cookies = page.context.cookies()
    [cookie] = [c for c in cookies if c["name"] == "envfarm_token"]
    assert cookie["httpOnly"]
    assert cookie["sameSite"] == "Strict"
    assert page.evaluate("document.cookie") == ""  # no script can read it
    # The cookie opens pages, not the API.
    status = page.evaluate("fetch('/v1/jobs').then(r => r.status)")
    assert status == 401
    assert offline.attempts == []


def test_a_finished_job_reads_like_a_run(
    served: tuple[ServeProcess, str], page: Page, offline: Offline, shots: Path
) -> None:
    server, job_id = served
    page.goto(server.url + "/ui/")
    page.get_by_label("API token").fill(TOKEN)
    page.get_by_role("button", name="log in").click()
    expect(page.locator("a.run")).to_have_text("browser oracle")
    expect(page.locator("table")).to_contain_text("completed")
    page.locator("a.run").click()
    expect(page.locator("table.episodes a.trajectory")).to_have_count(2)
    expect(page.locator("table.tasks")).to_contain_text("envfarm/word-count-cli")
    page.screenshot(path=shots / "serve-job.png", full_page=True)
    page.locator("table.episodes a.trajectory").first.click()
    expect(page.locator("#reward")).to_contain_text("reward 1")
    expect(page.locator("#turn-0")).to_contain_text("solve.sh")
    expect(page.locator("#artifacts")).to_contain_text("kept by `envfarm run` only")
    assert job_id in page.content()
    assert offline.attempts == []
