"""Headless Chromium (Debian's ``chromium``) driven by Playwright, without a browser download.

Every request the browser makes to anything but loopback is refused and recorded, so a page
that would need the network shows it in ``offline.attempts``. Screenshots go to
``build/test-artifacts/viewer/`` (or ``$ENVFARM_TEST_ARTIFACTS/viewer``).
"""

from __future__ import annotations

import os
import shutil
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
