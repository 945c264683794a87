"""An artifact on a volume that a sidecar writes and main mounts read-only: the fresh verifier
container mounts the same volume, so it reads the file in place (nothing is carried onto it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envfarm.controller.episode import EpisodeRequest, EpisodeRunner
from envfarm.controller.policies import PolicySpec, open_policy
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.spec.task import Task, load_task
from tests.plans import sandbox_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")

COMPOSE = """services:
  main:
    volumes:
      - tool_log:/srv/tool-log:ro
    depends_on:
      tool:
        condition: service_healthy
  tool:
    image: debian:bookworm-slim
    command:
      - sh
      - -c
      - echo '{"call":1}' > /srv/tool-log/requests.ndjson && exec sleep infinity
    volumes:
      - tool_log:/srv/tool-log
    healthcheck:
      test: ["CMD", "test", "-s", "/srv/tool-log/requests.ndjson"]
      interval: 1s
      timeout: 3s
      retries: 30
volumes:
  tool_log:
"""

TEST_SH = """mkdir -p /logs/verifier
if grep -q '"call":1' /srv/tool-log/requests.ndjson && [ -f /app/answer ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


def make_task(root: Path, mode: str) -> Task:
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "solution").mkdir()
    (root / "task.toml").write_text(
        f'artifacts = ["/srv/tool-log/requests.ndjson"]\n[task]\nname = "test/{root.name}"\n'
        f'[verifier]\nenvironment_mode = "{mode}"\n'
        '[environment]\nworkdir = "/app"\nmemory_mb = 512\n'
    )
    (root / "instruction.md").write_text("Answer.\n")
    (root / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nRUN mkdir -p /app\nWORKDIR /app\n"
    )
    (root / "environment" / "docker-compose.yaml").write_text(COMPOSE)
    (root / "solution" / "solve.sh").write_text("echo 42 > /app/answer\n")
    (root / "tests" / "test.sh").write_text(TEST_SH)
    return load_task(root)


@pytest.mark.parametrize("mode", ["clean", "separate", "shared"])
async def test_an_artifact_on_a_read_only_shared_volume_is_read_in_place(
    tmp_path: Path, mode: str
) -> None:
    task = make_task(tmp_path / f"volume-artifact-{mode}", mode)
    backend = DockerBackend()
    image = await backend.prepare(sandbox_spec(task))
    async with open_policy(PolicySpec(base_url="oracle")) as policy:
        runner = EpisodeRunner(
            backend=backend,
            policy=policy,
            grader=TestScriptGrader(),
            run_id="test-cleanroom-volumes",
            artifacts_dir=tmp_path / "artifacts",
        )
        trajectory = await runner.run(
            EpisodeRequest(task=task, image=image, job_id="j", group_id="g", episode_id="ep")
        )
    assert trajectory.error is None, trajectory.error
    expected = 0.0 if mode == "separate" else 1.0  # separate: the workdir is not carried
    assert (trajectory.reward.valid, trajectory.reward.value) == (True, expected)
    episode = tmp_path / "artifacts" / "ep"
    if mode != "shared":
        received = json.loads((episode / "verifier-input.json").read_text())
        assert "/srv/tool-log/requests.ndjson" not in received["artifacts"]
        assert not [p for p in received["carried"] if p.startswith("/srv/tool-log")]
    copied = list((episode / "collected").rglob("requests.ndjson"))
    assert copied, sorted(p.relative_to(episode) for p in episode.rglob("*"))
    assert '"call":1' in copied[0].read_text()
