"""The browser's side of the API: /ui over the JobService, /ui/login and its cookie (good for
GET pages of /ui and /docs only), and /docs and /redoc with assets served from a package."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio

from envfarm.api import create_app
from envfarm.api.server import ApiServer
from envfarm.models.jobs import JobPolicy, JobRequest
from tests.unit.api_double import MemoryService

pytestmark = pytest.mark.asyncio(loop_scope="session")

TOKEN = "browser-test-token-7c1e"
HTML = {"Accept": "text/html,application/xhtml+xml"}


@pytest_asyncio.fixture(loop_scope="session")
async def served() -> AsyncIterator[tuple[str, MemoryService]]:
    service = MemoryService()
    job_id = await service.submit(
        JobRequest(tasks=["alpha"], policy=JobPolicy(base_url="nop"), group_size=2)
    )
    service.add_group(job_id, size=2)
    service.add_group(job_id, task_id="beta", size=3)
    async with ApiServer(create_app(service, token=TOKEN)) as server:
        yield server.url, service


async def login(
    session: aiohttp.ClientSession, url: str, token: str = TOKEN
) -> aiohttp.ClientResponse:
    return await session.post(
        url + "/ui/login", data={"token": token, "next": "/ui/"}, allow_redirects=False
    )


async def test_a_browser_without_the_token_is_sent_to_the_login_form(
    served: tuple[str, MemoryService],
) -> None:
    url, _ = served
    async with aiohttp.ClientSession() as session:
        response = await session.get(url + "/ui/runs/x", headers=HTML, allow_redirects=False)
        assert response.status == 303
        assert response.headers["Location"] == "/ui/login?next=/ui/runs/x"
        response = await session.get(url + "/ui/", allow_redirects=False)  # not a browser
        assert response.status == 401
        form = await session.get(url + "/ui/login")
        assert form.status == 200
        assert "name=token" in await form.text()
        style = await session.get(url + "/ui/static/viewer.css")
        assert style.status == 200


async def test_login_sets_an_httponly_strict_cookie_that_opens_the_pages_only(
    served: tuple[str, MemoryService],
) -> None:
    url, service = served
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as session:
        wrong = await login(session, url, "nope")
        assert wrong.status == 401
        assert "that token is wrong" in await wrong.text()
        response = await login(session, url)
        assert response.status == 303
        assert response.headers["Location"] == "/ui/"
        cookie = response.headers["Set-Cookie"]
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie.replace("Strict", "strict")
        assert "Path=/" in cookie
        home = await session.get(url + "/ui/")
        text = await home.text()
        assert home.status == 200
        assert "job-1" in text
        run = await session.get(url + "/ui/runs/job-1")
        assert run.status == 200
        assert "alpha" in await run.text()
        assert "beta" in await run.text()
        page = await session.get(url + "/ui/runs/job-1/t/job-1-g2-t1")
        assert page.status == 200
        assert "job-1-g2-t1" in await page.text()
        for path in ("/docs", "/openapi.json"):
            assert (await session.get(url + path)).status == 200, path
        # The cookie never authorizes the API, and never a request that changes state.
        assert (await session.get(url + "/v1/jobs")).status == 401
        before = len(service.requests)
        job = {"tasks": ["alpha"], "policy": {"base_url": "nop"}}
        assert (await session.post(url + "/v1/jobs", json=job)).status == 401
        assert (await session.post(url + "/ui/", data=b"x")).status == 401
        assert len(service.requests) == before


async def test_login_never_redirects_off_the_server(served: tuple[str, MemoryService]) -> None:
    url, _ = served
    async with aiohttp.ClientSession() as session:
        for target in ("//elsewhere.example/", "https://elsewhere.example/", "/v1/jobs"):
            response = await session.post(
                url + "/ui/login", data={"token": TOKEN, "next": target}, allow_redirects=False
            )
            assert response.headers["Location"] == "/ui/", target


async def test_docs_load_swagger_ui_from_the_server_itself(
    served: tuple[str, MemoryService],
) -> None:
    url, _ = served
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(headers=auth) as session:
        html = await (await session.get(url + "/docs")).text()
        assert "/docs/assets/swagger-ui-bundle.js" in html
        assert "cdn" not in html.lower()
        script = await session.get(url + "/docs/assets/swagger-ui-bundle.js")
        assert script.status == 200
        assert len(await script.read()) > 100_000
        redoc = await (await session.get(url + "/redoc")).text()
        assert "/docs/assets/redoc.standalone.js" in redoc
        assert "googleapis" not in redoc
