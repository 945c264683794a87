"""Per-phase network_mode on the real engine: the agent and the verifier of one episode get
different network access, while the environment's sidecars stay reachable throughout.

"Outside" is an HTTP server on this host, listening on the default bridge's gateway address: a
container reaches it only through the bridge, i.e. only with network access.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from envfarm.controller.episode import EpisodeRequest, EpisodeRunner
from envfarm.controller.policies import PolicySpec, open_policy
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.sandbox.docker.networks import bridge_gateway
from envfarm.spec.task import Task, load_task
from tests.plans import sandbox_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")

# Each phase writes what it saw: "<http status> <default route?> <sidecar answer?>".
PROBE = r"""probe() {
  code=$(curl -s -m 3 -o /dev/null -w '%{http_code}' "http://$OUTSIDE/" || true)
  route=$(awk 'NR > 1 && $2 == "00000000" {found = 1} END {print found ? 1 : 0}' /proc/net/route)
  sidecar=0
  if [ "$WITH_SIDECAR" = 1 ] && timeout 5 bash -c \
      'exec 3<>/dev/tcp/cache/6379 && printf "PING\r\n" >&3 && head -c 5 <&3' | grep -q PONG
  then sidecar=1; fi
  echo "$code $route $sidecar"
}
"""

TEST_SH = r"""read -r a_code a_route a_sidecar < /app/agent_saw
read -r v_code v_route v_sidecar <<< "$(probe)"
mkdir -p /logs/verifier
ok() { [ "$1" = 200 ] && echo 1 || echo 0; }
cat > /logs/verifier/reward.json <<EOF
{"reward": 1, "agent_outside": $(ok "$a_code"), "agent_route": $a_route,
 "agent_sidecar": $a_sidecar, "verifier_outside": $(ok "$v_code"),
 "verifier_route": $v_route, "verifier_sidecar": $v_sidecar}
EOF
"""

COMPOSE = """services:
  main:
    depends_on:
      cache:
        condition: service_healthy
  cache:
    image: redis:7
    command: redis-server --save "" --appendonly no
    healthcheck:
      test: ["CMD", "redis-cli", "ping"]
      interval: 1s
      timeout: 3s
      retries: 20
"""


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"hello from the host\n")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def outside() -> Iterator[str]:
    """``host:port`` of an HTTP server on the default bridge's gateway address."""
    gateway = bridge_gateway()
    server = ThreadingHTTPServer((gateway, 0), _Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"{gateway}:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def make_task(root: Path, outside: str, *, agent: str, verifier: str, sidecar: bool) -> Task:
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "solution").mkdir()
    (root / "task.toml").write_text(
        f'[task]\nname = "test/{root.name}"\n'
        f'[agent]\nnetwork_mode = "{agent}"\n'
        f'[verifier]\nnetwork_mode = "{verifier}"\nenvironment_mode = "shared"\n'
        '[environment]\nworkdir = "/app"\nmemory_mb = 512\n'
    )
    (root / "instruction.md").write_text("Record what the network looks like.\n")
    (root / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nRUN mkdir -p /app\nWORKDIR /app\n"
    )
    if sidecar:
        (root / "environment" / "docker-compose.yaml").write_text(COMPOSE)
    header = f"OUTSIDE={outside}\nWITH_SIDECAR={int(sidecar)}\n{PROBE}"
    (root / "solution" / "solve.sh").write_text(f"{header}probe > /app/agent_saw\n")
    (root / "tests" / "test.sh").write_text(header + TEST_SH)
    return load_task(root)


async def run_oracle(task: Task) -> dict[str, float]:
    backend = DockerBackend()
    image = await backend.prepare(sandbox_spec(task))
    async with open_policy(PolicySpec(base_url="oracle")) as policy:
        runner = EpisodeRunner(
            backend=backend, policy=policy, grader=TestScriptGrader(), run_id="test-phase-net"
        )
        trajectory = await runner.run(
            EpisodeRequest(task=task, image=image, job_id="j", group_id="g", episode_id="ep")
        )
    assert trajectory.error is None, trajectory.error
    assert trajectory.reward.valid, trajectory.reward
    return trajectory.reward.components


async def test_no_network_agent_then_public_verifier(tmp_path: Path, outside: str) -> None:
    task = make_task(
        tmp_path / "offline-agent", outside, agent="no-network", verifier="public", sidecar=False
    )
    seen = await run_oracle(task)
    assert (seen["agent_outside"], seen["agent_route"]) == (0, 0)
    assert (seen["verifier_outside"], seen["verifier_route"]) == (1, 1)


async def test_public_agent_then_no_network_verifier_sidecar_stays(
    tmp_path: Path, outside: str
) -> None:
    task = make_task(
        tmp_path / "offline-verifier", outside, agent="public", verifier="no-network", sidecar=True
    )
    seen = await run_oracle(task)
    assert (seen["agent_outside"], seen["agent_route"], seen["agent_sidecar"]) == (1, 1, 1)
    assert (seen["verifier_outside"], seen["verifier_route"], seen["verifier_sidecar"]) == (0, 0, 1)


async def test_no_network_agent_then_public_verifier_with_sidecar(
    tmp_path: Path, outside: str
) -> None:
    task = make_task(
        tmp_path / "offline-agent-db", outside, agent="no-network", verifier="public", sidecar=True
    )
    seen = await run_oracle(task)
    assert (seen["agent_outside"], seen["agent_route"], seen["agent_sidecar"]) == (0, 0, 1)
    assert (seen["verifier_outside"], seen["verifier_route"], seen["verifier_sidecar"]) == (1, 1, 1)
