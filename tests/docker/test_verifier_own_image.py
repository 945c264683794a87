"""A separate verifier in an image of its own (Harbor's ``[verifier.environment]``): built from
the task's ``tests/Dockerfile``, which holds the tests, it receives only the declared artifacts;
the oracle scores 1 there and the nop 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfarm.controller.episode import EpisodeRequest, EpisodeRunner
from envfarm.controller.policies import PolicySpec, open_policy
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.sandbox.base import VerifierImage
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.sandbox.docker.verifier_image import verifier_image_tag
from envfarm.spec.task import load_task
from tests.plans import sandbox_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "verifier-own-image"


@pytest.mark.parametrize("agent", ["oracle", "nop"])
async def test_the_verifier_runs_in_its_own_image_with_the_artifacts_alone(
    tmp_path: Path, created_tags: list[str], agent: str
) -> None:
    task = load_task(FIXTURE)
    assert task.config.verifier.environment_mode == "separate"
    backend = DockerBackend()
    image = await backend.prepare(sandbox_spec(task))
    created_tags.append(image.tag)
    own = VerifierImage(task_id=task.id, content_hash=task.content_hash, context=task.tests_dir)
    created_tags.append(await verifier_image_tag(own))
    async with open_policy(PolicySpec(base_url=agent)) as policy:
        runner = EpisodeRunner(
            backend=backend,
            policy=policy,
            grader=TestScriptGrader(),
            run_id=f"test-verifier-own-image-{agent}",
            artifacts_dir=tmp_path,
        )
        trajectory = await runner.run(
            EpisodeRequest(task=task, image=image, job_id="j", group_id="g", episode_id="ep")
        )
    assert trajectory.error is None, trajectory.error
    expected = 1.0 if agent == "oracle" else 0.0
    assert (trajectory.reward.valid, trajectory.reward.value) == (True, expected)
