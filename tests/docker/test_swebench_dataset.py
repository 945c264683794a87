"""A SWE-bench-style dataset run on the real engine: a tiny Python package of our own, committed
with git at /testbed, is built into an instance image, pushed to a registry on loopback and
removed locally; records of it are then checked with the oracle (the gold patch) and the no-op
agent: the gold patch resolves (1.0), doing nothing does not (0), a gold patch that breaks a
PASS_TO_PASS test scores 0, and a test patch that does not apply at base_commit is an invalid
reward whose reason names the dataset line and the instance."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from envfarm.check.pipeline import CheckConfig, check_tasks
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.images.pull import forget_unreachable
from envfarm.sandbox.docker.images.task_images import build_task_image
from envfarm.spec.task import discover_tasks
from tests.docker.registry import loopback_registry

pytestmark = pytest.mark.asyncio(loop_scope="session")
RUN = uuid.uuid4().hex[:10]

DOCKERFILE = """FROM python:3.11-slim
RUN pip install --no-cache-dir pytest==8.3.5
COPY calc /testbed
RUN cd /testbed && git init -q && git add -A \\
    && git -c user.name=envfarm -c user.email=tests@envfarm.invalid commit -qm base
"""
CORE = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
TESTS = "from calc.core import add, sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"


def diff(path: str, old: str, new: str) -> str:
    """A one-hunk git diff replacing the whole of ``old`` by ``new``."""
    old_lines, new_lines = old.splitlines(), new.splitlines()
    body = [f"-{line}" for line in old_lines] + [f"+{line}" for line in new_lines]
    return (
        f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n"
        f"@@ -1,{len(old_lines)} +1,{len(new_lines)} @@\n" + "\n".join(body) + "\n"
    )


FIXED = CORE.replace("return a - b", "return a + b", 1)
BREAKS_SUB = FIXED.replace("return a - b", "return a * b")
NEW_TESTS = TESTS + "\n\ndef test_add():\n    assert add(2, 3) == 5\n"
TEST_PATCH = diff("tests/test_core.py", TESTS, NEW_TESTS)
STALE_TEST_PATCH = diff("tests/test_core.py", TESTS.replace("5, 3", "7, 1"), NEW_TESTS)


def record(instance_id: str, **changes: Any) -> dict[str, Any]:
    return {
        "instance_id": instance_id,
        "repo": "acme/calc",
        "base_commit": "",
        "problem_statement": "calc.core.add subtracts instead of adding.",
        "patch": diff("calc/core.py", CORE, FIXED),
        "test_patch": TEST_PATCH,
        "FAIL_TO_PASS": ["tests/test_core.py::test_add"],
        "PASS_TO_PASS": ["tests/test_core.py::test_sub"],
        "test_cmd": "python -m pytest -rA -p no:cacheprovider",
        **changes,
    }


@pytest.fixture
def registry_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, list[str]]]:
    """(the image pattern, the images to remove afterwards); instance images are pushed to a
    registry on loopback, none kept locally."""
    monkeypatch.setenv("ENVFARM_IMAGE_SOURCES", "local,pull,aliases")
    monkeypatch.delenv("ENVFARM_OFFLINE", raising=False)
    monkeypatch.setenv("ENVFARM_DATASET_CACHE", str(tmp_path / "cache"))
    forget_unreachable()
    pulled: list[str] = []
    with loopback_registry(tmp_path / "registry") as address:
        pattern = f"{address}/swebench/sweb.eval.x86_64.{{instance_key}}:{RUN}"
        monkeypatch.setenv("ENVFARM_DATASET_IMAGE", pattern)
        yield pattern, pulled
    forget_unreachable()
    for tag in pulled:
        with contextlib.suppress(docker.errors.APIError):
            docker_client().images.remove(tag, force=True)


async def build_instance_image(tmp_path: Path) -> tuple[str, str]:
    """The tiny repository's image (tag, base commit)."""
    root = tmp_path / "instance"
    (root / "calc" / "calc").mkdir(parents=True)
    (root / "calc" / "tests").mkdir()
    (root / "calc" / "calc" / "__init__.py").write_text("")
    (root / "calc" / "calc" / "core.py").write_text(CORE)
    (root / "calc" / "tests" / "test_core.py").write_text(TESTS)
    (root / "Dockerfile").write_text(DOCKERFILE)
    built = await build_task_image(
        root, root / "Dockerfile", root, f"swebench-{RUN}", uuid.uuid4().hex, timeout=600
    )
    output = docker_client().containers.run(
        built.tag, ["git", "-C", "/testbed", "rev-parse", "HEAD"], remove=True, entrypoint=[]
    )
    return built.tag, output.decode().strip()


def push_as(tag: str, reference: str) -> None:
    client = docker_client()
    repository, _, version = reference.rpartition(":")
    client.images.get(tag).tag(repository, version)
    try:
        events = client.api.push(repository, version, stream=True, decode=True)
        errors = [event["error"] for event in events if "error" in event]
        assert not errors, errors
    finally:
        client.images.remove(reference)


async def test_records_of_our_own_repository_are_graded_by_their_lists(
    tmp_path: Path, registry_image: tuple[str, list[str]]
) -> None:
    pattern, pulled = registry_image
    tag, base_commit = await build_instance_image(tmp_path)
    pulled.append(tag)  # removed with the pulled images
    records = [
        record("acme__calc-1", base_commit=base_commit),
        record(
            "acme__calc-2",
            base_commit=base_commit,
            patch=diff("calc/core.py", CORE, BREAKS_SUB),
        ),
        record("acme__calc-3", base_commit=base_commit, test_patch=STALE_TEST_PATCH),
        record("acme__calc-4", base_commit=base_commit, repo="acme/unknown", test_cmd=None),
    ]
    dataset = tmp_path / "calc.jsonl"
    dataset.write_text(
        "".join(json.dumps({k: v for k, v in r.items() if v}) + "\n" for r in records)
    )
    for instance in ("acme__calc-1", "acme__calc-2", "acme__calc-3"):
        reference = pattern.replace("{instance_key}", instance.replace("__", "_1776_"))
        push_as(tag, reference)
        pulled.append(reference)
        with pytest.raises(docker.errors.ImageNotFound):
            docker_client().images.get(reference)

    tasks, errors = discover_tasks([dataset])
    assert [str(e) for e in errors] == [
        f"{dataset}:4: instance 'acme__calc-4': no test command for repository 'acme/unknown': "
        "add it to a table named by ENVFARM_DATASET_COMMANDS (docs/datasets.md) or give the "
        "record a 'test_cmd'"
    ]
    config = CheckConfig(runs=1, concurrency=2, artifacts_dir=tmp_path / "artifacts")
    report = await check_tasks(tasks, errors, DockerBackend(), TestScriptGrader(), config)
    assert report.exit_code == 2
    checks = {check.task_id: check for check in report.checks}

    resolved = checks["acme__calc-1"]
    assert resolved.oracle_rewards == [1.0], (resolved.problems, resolved.infra, resolved.notes)
    assert resolved.nop_reward == 0.0
    assert resolved.verdict == "sound", resolved.problems

    breaks = checks["acme__calc-2"]
    assert breaks.oracle_rewards == [0.0], (breaks.problems, breaks.infra, breaks.notes)
    assert any(p.startswith("oracle fails") for p in breaks.problems), breaks.problems

    stale = checks["acme__calc-3"]
    assert stale.oracle_rewards == [None], (stale.problems, stale.infra, stale.notes)
    explained = "\n".join([*stale.problems, *stale.infra, *stale.notes])
    assert (
        f"envfarm: {dataset}:3: instance acme__calc-3: the test_patch does not apply at "
        f"base_commit {base_commit}" in explained
    ), explained
