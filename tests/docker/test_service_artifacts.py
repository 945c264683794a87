"""Artifacts of a sidecar (Harbor's ``artifacts`` with ``service``) on the real engine: copied
out of the service's container when the agent has stopped, kept with the episode's artifacts
beside the main container's, and received by a clean or separate verifier at their paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envfarm.check.pipeline import in_mode
from envfarm.controller.episode import EpisodeRequest, EpisodeRunner
from envfarm.controller.policies import PolicySpec, open_policy
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.spec import load_task
from envfarm.spec.config import EnvironmentMode
from tests.plans import sandbox_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "service-artifacts"


@pytest.mark.parametrize("mode", ["clean", "separate"])
async def test_a_sidecars_artifacts_are_kept_and_reach_a_fresh_verifier(
    tmp_path: Path, mode: EnvironmentMode
) -> None:
    task = in_mode(load_task(FIXTURE), mode)
    backend = DockerBackend()
    image = await backend.prepare(sandbox_spec(task))
    async with open_policy(PolicySpec(base_url="oracle")) as policy:
        runner = EpisodeRunner(
            backend=backend,
            policy=policy,
            grader=TestScriptGrader(),
            run_id="test-service-artifacts",
            artifacts_dir=tmp_path / "artifacts",
        )
        trajectory = await runner.run(
            EpisodeRequest(task=task, image=image, job_id="j", group_id="g", episode_id="ep")
        )
    assert trajectory.error is None, trajectory.error
    assert trajectory.reward.value == 1.0, trajectory.reward
    assert trajectory.reward.components["saw_recorder_log"] == 1.0
    root = tmp_path / "artifacts" / "ep"
    files = root / "collected"
    assert json.loads((files / "srv/log/requests.ndjson").read_text()) == {
        "path": "/status",
        "code": 200,
    }
    kept = sorted(
        p.relative_to(files / "recorder-log").as_posix()
        for p in (files / "recorder-log").rglob("*")
    )
    assert kept == ["day1", "day1/old.ndjson", "requests.ndjson"]  # partial.tmp excluded
    assert (files / "app/answer.txt").read_text() == "42\n"  # the main container's, as before
    notes = json.loads((root / "episode.json").read_text())["notes"]
    assert "artifact recorder:/srv/never-written: does not exist" in notes
    carried = json.loads((root / "verifier-input.json").read_text())
    assert carried["mode"] == mode
    assert "/srv/log/requests.ndjson" in carried["artifacts"]
