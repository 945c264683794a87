"""Whether a separate verifier runs in an image of its own, as Harbor 0.26 decides it
(``resolve_verifier_environment_definition``): in ``separate`` mode, the image that
``[verifier.environment] docker_image`` names, else the one a ``Dockerfile`` in the task's
``tests/`` builds (with ``tests/`` as its context), else none (a fresh container of the task's
own environment). An image of its own holds the tests itself, so ``tests/`` is not uploaded into
it (Harbor's ``skip_tests_upload``)."""

from __future__ import annotations

from envfarm.plan.models import VerifierPlan
from envfarm.sandbox.base import VerifierImage


def own_image(plan: VerifierPlan) -> VerifierImage | None:
    if plan.mode != "separate":
        return None
    own = plan.config.environment
    timeout = own.build_timeout_sec if own is not None else 600.0
    common = {"task_id": plan.task_id, "content_hash": plan.task_hash, "build_timeout_s": timeout}
    if own is not None and own.docker_image:
        return VerifierImage(reference=own.docker_image, **common)
    if (plan.tests_dir / "Dockerfile").is_file():
        return VerifierImage(context=plan.tests_dir, **common)
    return None
