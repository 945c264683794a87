"""The verifier of a task that sets no network field gets Harbor's default (public) in a fresh
container, and none with the strict setting, on the real engine.

The fixture's tests/test.sh installs its helper package at grading time, as many public tasks
do. The package index is an HTTP server of this test on the default bridge's gateway address,
holding one wheel built here: a container reaches it only with network access.
"""

from __future__ import annotations

import io
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from envfarm.check.pipeline import CheckConfig, check_tasks
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.sandbox.docker.networks import bridge_gateway
from envfarm.spec import load_task

pytestmark = pytest.mark.asyncio(loop_scope="session")
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "grading-downloads"
WHEEL = "envfarm_probe_grader-1.0-py3-none-any.whl"
MODULE = b"""def grade(path):
    try:
        return 1 if open(path).read().strip() == "ready" else 0
    except OSError:
        return 0
"""


def _wheel() -> bytes:
    info = "envfarm_probe_grader-1.0.dist-info"
    files = {
        "envfarm_probe_grader/__init__.py": MODULE,
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: envfarm-probe-grader\nVersion: 1.0\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"]).encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in {**files, f"{info}/RECORD": record}.items():
            archive.writestr(name, data)
    return buffer.getvalue()


class _Index(BaseHTTPRequestHandler):
    wheel = _wheel()

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/simple/envfarm-probe-grader":
            body = f'<a href="/files/{WHEEL}">{WHEEL}</a>'.encode()
            kind = "text/html"
        elif self.path == f"/files/{WHEEL}":
            body, kind = self.wheel, "application/octet-stream"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def index() -> Iterator[str]:
    server = ThreadingHTTPServer((bridge_gateway(), 0), _Index)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://{bridge_gateway()}:{server.server_address[1]}/simple/"
    server.shutdown()
    server.server_close()


async def test_an_unset_verifier_network_is_public_in_the_clean_room_and_none_when_strict(
    index: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVFARM_PROBE_INDEX", index)
    task = load_task(FIXTURE)
    assert task.config.verifier.environment_mode == "clean"
    backend = DockerBackend()
    config = CheckConfig(runs=1, concurrency=2, artifacts_dir=tmp_path / "default" / "artifacts")
    (check,) = (await check_tasks([task], [], backend, TestScriptGrader(), config)).checks
    assert (check.oracle_rewards, check.nop_reward) == ([1.0], 0.0), (check.problems, check.notes)
    assert check.verdict == "sound", check.problems
    assert any("has public network access (Harbor's default)" in i for i in check.info)

    monkeypatch.setenv("ENVFARM_VERIFIER_NETWORK", "none")
    config = CheckConfig(runs=1, concurrency=2, artifacts_dir=tmp_path / "strict" / "artifacts")
    (strict,) = (await check_tasks([task], [], backend, TestScriptGrader(), config)).checks
    assert strict.oracle_rewards == [0.0]
    assert "  | could not install the grader's helper" in strict.notes
    cause = [p for p in strict.problems if p.startswith("likely cause")]
    assert cause == [
        "likely cause: the verifier had no network (ENVFARM_VERIFIER_NETWORK=none / "
        "--verifier-network none) and test.sh line 5 (`pip install`) downloads at grading "
        'time; set [verifier] network_mode = "public" or install it in the image'
    ]
