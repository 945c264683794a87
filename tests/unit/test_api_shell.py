"""The HTTP shell over real HTTP on loopback: auth, problems, validation, limits, OpenAPI.

The controller behind it is the in-memory double (api_double.py); what the real controller does
is covered by tests/integration/test_api_*.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from socket import IPPROTO_TCP, TCP_NODELAY
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from envfarm.api import create_app
from envfarm.api.server import ApiServer, listening_socket
from envfarm.controller.metrics import MetricsSnapshot
from envfarm.models.jobs import JobRequest
from tests.unit.api_double import MemoryService

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MAX_BODY = 4096
JOB = {"tasks": ["alpha"], "policy": {"base_url": "oracle"}, "group_size": 2}


@pytest_asyncio.fixture(loop_scope="session")
async def api() -> AsyncIterator[tuple[str, MemoryService, aiohttp.ClientSession]]:
    service = MemoryService()
    app = create_app(service, token=TOKEN, max_body_bytes=MAX_BODY, keepalive_s=0.2)
    async with ApiServer(app) as server, aiohttp.ClientSession() as session:
        yield server.url, service, session


async def call(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    **kwargs: Any,
) -> tuple[int, dict[str, str], Any]:
    async with session.request(method, url, headers=AUTH if headers is None else headers,
                               **kwargs) as response:  # fmt: skip
        text = await response.text()
        kind = response.headers.get("Content-Type", "")
        body = await response.json(content_type=None) if "json" in kind and text else text
        return response.status, dict(response.headers), body


async def test_health_needs_no_token_and_everything_else_does(
    api: tuple[str, MemoryService, aiohttp.ClientSession],
) -> None:
    url, _, session = api
    status, _, body = await call(session, "GET", url + "/healthz", headers={})
    assert (status, body) == (200, {"status": "ok"})
    for path in ("/v1/jobs", "/v1/tasks", "/metrics", "/openapi.json", "/docs", "/nowhere"):
        status, headers, body = await call(session, "GET", url + path, headers={})
        assert status == 401, path
        assert headers["Content-Type"] == "application/problem+json"
        assert headers["WWW-Authenticate"] == 'Bearer realm="envfarm"'
        assert body["type"] == "urn:envfarm:problem:unauthorized"
        assert body["status"] == 401
    status, headers, _ = await call(
        session, "POST", url + "/v1/jobs", headers={"Authorization": "Bearer wrong"}, json=JOB
    )
    assert status == 401
    assert 'error="invalid_token"' in headers["WWW-Authenticate"]
    status, _, _ = await call(session, "GET", url + "/v1/jobs")
    assert status == 200


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"policy": {"base_url": "oracle"}}, "tasks"),
        ({**JOB, "tasks": [3]}, "tasks[0]"),
        ({**JOB, "tasks": ["alpha", None]}, "tasks[1]"),
        ({**JOB, "policy": {"base_url": 7}}, "policy.base_url"),
        ({**JOB, "policy": {"model": "m"}}, "policy"),
        ({**JOB, "group_size": 0}, "group_size"),
        ({**JOB, "sampling": {"top_p": 3}}, "sampling.top_p"),
        ({**JOB, "colour": "red"}, "colour"),
        ({**JOB, "policy": {"endpoints": [{"url": "http://a", "weight": -1}]}},
         "policy.endpoints[0].weight"),
    ],
)  # fmt: skip
async def test_malformed_job_is_422_naming_the_field(
    api: tuple[str, MemoryService, aiohttp.ClientSession], body: dict[str, Any], field: str
) -> None:
    url, _, session = api
    status, headers, problem = await call(session, "POST", url + "/v1/jobs", json=body)
    assert status == 422
    assert headers["Content-Type"] == "application/problem+json"
    assert problem["type"] == "urn:envfarm:problem:validation"
    assert field in [error["field"] for error in problem["errors"]], problem
    assert problem["title"]
    assert problem["detail"]


async def test_unparseable_json_and_bad_query_are_422(
    api: tuple[str, MemoryService, aiohttp.ClientSession],
) -> None:
    url, service, session = api
    headers = {**AUTH, "Content-Type": "application/json"}
    status, _, problem = await call(
        session, "POST", url + "/v1/jobs", headers=headers, data=b'{"tasks": ['
    )
    assert status == 422
    assert problem["errors"][0]["field"] == "body"
    assert "not valid JSON" in problem["errors"][0]["message"]
    job_id = await service.submit(service_request())
    status, _, problem = await call(session, "GET", url + f"/v1/jobs/{job_id}/groups?limit=0")
    assert status == 422
    assert [e["field"] for e in problem["errors"]] == ["limit"]
    status, _, problem = await call(
        session, "POST", url + f"/v1/jobs/{job_id}/ack", json={"cursor": "x"}
    )
    assert (status, problem["errors"][0]["field"]) == (422, "cursor")


async def test_unknown_task_is_422_naming_its_index(
    api: tuple[str, MemoryService, aiohttp.ClientSession],
) -> None:
    url, _, session = api
    body = {**JOB, "tasks": ["alpha", "nope"]}
    status, _, problem = await call(session, "POST", url + "/v1/jobs", json=body)
    assert status == 422
    assert problem["type"] == "urn:envfarm:problem:unknown-task"
    assert problem["errors"][0]["field"] == "tasks[1]"


async def test_unknown_job_is_404_and_bad_transition_409(
    api: tuple[str, MemoryService, aiohttp.ClientSession],
) -> None:
    url, _, session = api
    for method, path in [("GET", ""), ("POST", "/pause"), ("GET", "/groups")]:
        status, _, problem = await call(session, method, url + "/v1/jobs/missing" + path)
        assert status == 404
        assert problem["type"] == "urn:envfarm:problem:job-not-found"
    status, _, created = await call(session, "POST", url + "/v1/jobs", json=JOB)
    assert status == 201
    job = url + f"/v1/jobs/{created['id']}"
    status, _, problem = await call(session, "POST", job + "/resume")
    assert status == 409
    assert problem["type"] == "urn:envfarm:problem:invalid-job-state"
    status, _, view = await call(session, "POST", job + "/pause")
    assert (status, view["status"]) == (200, "paused")


async def test_bodies_over_the_limit_are_413(
    api: tuple[str, MemoryService, aiohttp.ClientSession],
) -> None:
    url, _, session = api
    big = {**JOB, "name": "x" * MAX_BODY}
    status, _, problem = await call(session, "POST", url + "/v1/jobs", json=big)
    assert status == 413
    assert problem["type"] == "urn:envfarm:problem:body-too-large"

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"tasks": ["alpha"], "name": "'
        for _ in range(8):
            yield b"y" * 1024
        yield b'"}'

    headers = {**AUTH, "Content-Type": "application/json"}
    status, _, problem = await call(
        session, "POST", url + "/v1/jobs", headers=headers, data=chunks()
    )
    assert status == 413


async def test_unexpected_errors_are_500_problems_without_details(
    api: tuple[str, MemoryService, aiohttp.ClientSession],
) -> None:
    url, service, session = api
    service.fail_with = RuntimeError("api_key=sk-do-not-leak")
    try:
        status, headers, problem = await call(session, "POST", url + "/v1/jobs", json=JOB)
    finally:
        service.fail_with = None
    assert status == 500
    assert headers["Content-Type"] == "application/problem+json"
    assert "sk-do-not-leak" not in str(problem)


async def test_api_keys_are_never_echoed(
    api: tuple[str, MemoryService, aiohttp.ClientSession],
) -> None:
    url, _, session = api
    body = {
        **JOB,
        "policy": {
            "endpoints": [{"url": "http://a/v1", "api_key": "sk-endpoint-key"}],
            "api_key": "sk-policy-key",
        },
    }
    status, _, created = await call(session, "POST", url + "/v1/jobs", json=body)
    assert status == 201
    for path in (f"/v1/jobs/{created['id']}", "/v1/jobs"):
        status, _, text = await call(session, "GET", url + path)
        assert status == 200
        assert "sk-endpoint-key" not in str(text)
        assert "sk-policy-key" not in str(text)


async def test_openapi_documents_routes_problems_and_bearer_auth(
    api: tuple[str, MemoryService, aiohttp.ClientSession],
) -> None:
    url, _, session = api
    status, _, schema = await call(session, "GET", url + "/openapi.json")
    assert status == 200
    paths = schema["paths"]
    for path in ("/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/groups",
                 "/v1/jobs/{job_id}/ack", "/v1/policy-version", "/v1/tasks", "/healthz",
                 "/metrics", "/v1/jobs/{job_id}/pause", "/v1/jobs/{job_id}/cancel"):  # fmt: skip
        assert path in paths, path
    post = paths["/v1/jobs"]["post"]
    assert post["description"]
    assert "application/problem+json" in post["responses"]["422"]["content"]
    assert "Problem" in schema["components"]["schemas"]
    assert "HTTPValidationError" not in schema["components"]["schemas"]
    not_found = paths["/v1/jobs/{job_id}"]["get"]["responses"]["404"]["content"]
    assert list(not_found) == ["application/problem+json"]
    assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert paths["/healthz"]["get"]["security"] == []
    status, _, page = await call(session, "GET", url + "/docs")
    assert status == 200
    assert "swagger" in page.lower()


async def test_metrics_render_the_controller_snapshot(
    api: tuple[str, MemoryService, aiohttp.ClientSession],
) -> None:
    url, service, session = api
    snapshot = MetricsSnapshot(
        queue_depth=7,
        episodes_by_state={"queued": 5, "leased": 2},
        staleness={"job-1": 1},
        tokens_per_second=123.5,
        attempts=4,
        policy_version="v3",
    )
    for seconds in (0.3, 0.7, 0.9):
        snapshot.sandbox_start_seconds.observe(seconds)
    service.snapshot = snapshot
    status, headers, text = await call(session, "GET", url + "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain")
    for line in (
        "envfarm_queue_depth 7.0",
        'envfarm_episodes{state="leased"} 2.0',
        'envfarm_staleness{job="job-1"} 1.0',
        'envfarm_sandbox_start_seconds_bucket{le="0.5"} 1.0',
        'envfarm_sandbox_start_seconds_bucket{le="1.0"} 3.0',
        'envfarm_sandbox_start_seconds_bucket{le="+Inf"} 3.0',
        "envfarm_sandbox_start_seconds_count 3.0",
        "envfarm_policy_latency_seconds_count 0.0",
        "envfarm_tokens_per_second 123.5",
        "envfarm_attempts_total 4.0",
        'envfarm_policy_version_info{policy_version="v3"} 1.0',
    ):
        assert line in text, line


def service_request() -> JobRequest:
    return JobRequest.model_validate(JOB)


async def test_the_servers_connections_send_small_writes_at_once() -> None:
    """Nagle's algorithm off on every accepted connection: otherwise an answer's body, written
    after its headers, waits for the client's delayed acknowledgement (40 ms on Linux)."""
    sock = listening_socket("127.0.0.1", 0)
    flags: list[int] = []

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        flags.append(writer.get_extra_info("socket").getsockopt(IPPROTO_TCP, TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(accepted, sock=sock)
    async with server:
        reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        await reader.read()
        writer.close()
    assert len(flags) == 1
    assert flags[0] != 0
