"""API keys stay secret under ``envfarm serve``: an endpoint that echoes the caller's
``Authorization`` header back in its error body (as some proxies do) cannot make the policy or
judge key appear in the server's log, in any API answer, in trajectories or their error
messages, nor in any row of the store but the job's request, which the workers read it from."""

from __future__ import annotations

import asyncio
import shutil
import signal
import sqlite3
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from envfarm.client import EnvfarmClient
from tests.integration.serve_process import ServeProcess

pytestmark = [pytest.mark.docker, pytest.mark.asyncio(loop_scope="session")]

REPO = Path(__file__).resolve().parents[2]
POLICY_KEY = "sk-policy-secret-7d2e91"
JUDGE_KEY = "sk-judge-secret-40bb1c"
TOKEN = "keys-token"


class EchoingEndpoint(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = f'{{"error": "invalid key: {self.headers.get("Authorization")}"}}'.encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def echoing_endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), EchoingEndpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()


async def test_keys_never_leave_the_job_request(echoing_endpoint: str, tmp_path: Path) -> None:
    shutil.copytree(REPO / "tasks" / "word-count-cli", tmp_path / "tasks" / "word-count-cli")
    db = tmp_path / "store.db"
    server = ServeProcess(
        tmp_path, "--db", f"sqlite:///{db}", "--tasks", "tasks", "--data-dir", "data",
        "--concurrency", "1", token=TOKEN,
    ).start()  # fmt: skip
    answers: list[str] = []
    try:
        async with EnvfarmClient(server.url, TOKEN) as client:
            job_id = await client.submit({
                "tasks": ["envfarm/word-count-cli"], "group_size": 1,
                "policy": {"base_url": echoing_endpoint, "model": "m", "api_key": POLICY_KEY},
                "judge": {"base_url": echoing_endpoint, "api_key": JUDGE_KEY},
            })  # fmt: skip
            for _ in range(2400):  # the first run may build the image
                view = await client.job(job_id)
                if view.status in {"completed", "failed", "cancelled"}:
                    break
                await asyncio.sleep(0.5)
            answers.append(view.model_dump_json())
            page = await client.page(job_id)
            answers.append(page.model_dump_json())
    finally:
        assert server.stop(signal.SIGTERM) == 0, server.output()
    assert view.status in {"completed", "failed"}, view
    trajectories = [t for g in page.groups for t in g.trajectories]
    assert trajectories
    assert all(t["error"] for t in trajectories), trajectories
    written = b"".join(p.read_bytes() for p in (tmp_path / "data").rglob("*") if p.is_file())
    for key in (POLICY_KEY, JUDGE_KEY):
        assert key not in server.output()
        assert all(key not in answer for answer in answers)
        assert key.encode() not in written
    with sqlite3.connect(db) as connection:
        tables = [
            row[0]
            for row in connection.execute("select name from sqlite_master where type='table'")
        ]
        holders = set()
        for table in tables:
            for row in connection.execute(f'select * from "{table}"'):
                text = repr(row)
                if POLICY_KEY in text or JUDGE_KEY in text:
                    holders.add(table)
    assert holders <= {"jobs"}, holders
