"""A separate verifier's own image, as Harbor 0.26 picks it (grading/verifier/own_image.py), and
its refusal on Kubernetes."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfarm.errors import TaskConfigError
from envfarm.grading.verifier.own_image import own_image
from envfarm.plan.models import VerifierPlan
from envfarm.sandbox.base import VerifierImage
from envfarm.sandbox.kubernetes.verifier_pod import refuse_own_image
from envfarm.spec.verifier_config import VerifierConfig, VerifierEnvironment


def _plan(tmp_path: Path, config: VerifierConfig) -> VerifierPlan:
    return VerifierPlan(
        mode=config.environment_mode,
        network=False,
        agent_network=False,
        clean_room="fresh",
        reason="test",
        task_id="t",
        task_hash="h" * 16,
        task_root=tmp_path,
        tests_dir=tmp_path / "tests",
        instruction="",
        config=config,
    )


def test_the_image_named_wins_then_the_tests_dockerfile_then_none(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    separate = VerifierConfig(environment_mode="separate")
    assert own_image(_plan(tmp_path, separate)) is None
    (tmp_path / "tests" / "Dockerfile").write_text("FROM x\n")
    built = own_image(_plan(tmp_path, separate))
    assert built is not None
    assert built.context == tmp_path / "tests"
    named = separate.model_copy(update={"environment": VerifierEnvironment(docker_image="y:1")})
    found = own_image(_plan(tmp_path, named))
    assert found is not None
    assert (found.reference, found.context) == ("y:1", None)
    assert own_image(_plan(tmp_path, VerifierConfig(environment_mode="clean"))) is None


def test_kubernetes_refuses_an_image_of_its_own() -> None:
    refuse_own_image(None)
    with pytest.raises(TaskConfigError, match="not supported on Kubernetes"):
        refuse_own_image(VerifierImage(task_id="t", content_hash="h", reference="y:1"))
