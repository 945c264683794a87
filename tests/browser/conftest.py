"""Headless Chromium (Debian's ``chromium``) driven by Playwright, without a browser download.

Every request the browser makes to anything but loopback is refused and recorded, so a page
that would need the network shows it in ``offline.attempts``. Screenshots go to
``build/test-artifacts/viewer/`` (or ``$ENVFARM_TEST_ARTIFACTS/viewer``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Page, Route, sync_playwright

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


class Offline:
    def __init__(self) -> None:
        self.attempts: list[str] = []

    def route(self, route: Route) -> None:
        host = urlsplit(route.request.url).hostname
        if host in ("127.0.0.1", "localhost", "::1") or route.request.url.startswith("data:"):
            route.continue_()
        else:
            self.attempts.append(route.request.url)
            route.abort()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def offline() -> Offline:
    return Offline()


@pytest.fixture
def page(browser: Browser, offline: Offline) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.route("**/*", offline.route)
    opened = context.new_page()
    try:
        yield opened
    finally:
        context.close()


@pytest.fixture(scope="session")
def shots() -> Path:
    root = Path(os.environ.get("ENVFARM_TEST_ARTIFACTS", REPO / "build" / "test-artifacts"))
    path = root / "viewer"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def served_viewer(*runs: Path) -> Iterator[str]:
    """``envfarm view RUN...`` on a free port, its URL while the context lasts."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "envfarm", "view", *map(str, runs), "--port", "0", "--no-open"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"serving on (http://127\.0\.0\.1:\d+/)", line)
    try:
        assert found, line + (proc.stdout.read() if proc.poll() is not None else "")
        yield found.group(1)
    finally:
        proc.terminate()
        proc.wait(30)
