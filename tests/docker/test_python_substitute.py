"""The offline python:* substitutes behave like the official image where Dockerfiles depend on
it: pip owns /usr/local (upgrading or pinning pip, packaging, setuptools works, and so does
`uv pip install --system`), no Debian python3-* library is on the path, PYTHON_VERSION is the
interpreter's, and `python -m venv` works."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envfarm.check.pipeline import CheckConfig, check_tasks
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.images.task_images import ensure_recipe_image
from envfarm.spec import load_task

pytestmark = pytest.mark.asyncio(loop_scope="session")
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "python-pip-upgrade"


def _run(image: str, command: str) -> str:
    output = docker_client().containers.run(
        image, ["sh", "-c", command], remove=True, entrypoint=[]
    )
    return bytes(output).decode()


@pytest.mark.parametrize(
    ("recipe", "minor", "packages"),
    [
        ("python-slim-trixie", "3.13", ["pip"]),
        ("python-slim", "3.11", ["pip", "setuptools", "wheel"]),
        pytest.param(
            "python312-slim",
            "3.12",
            ["pip"],
            marks=pytest.mark.skipif(
                not os.environ.get("ENVFARM_UBUNTU_ARCHIVE"),
                reason="Python 3.12 comes from the Ubuntu archive ENVFARM_UBUNTU_ARCHIVE names",
            ),
        ),
    ],
)
async def test_the_substitute_is_laid_out_like_the_official_image(
    recipe: str, minor: str, packages: list[str]
) -> None:
    tag = (await ensure_recipe_image(recipe)).tag
    listed = _run(tag, "pip list --format=freeze 2>/dev/null")
    assert sorted(line.split("==")[0] for line in listed.split()) == packages
    assert _run(tag, "for c in python python3 pip; do command -v $c; done").split() == [
        "/usr/local/bin/python",
        "/usr/local/bin/python3",
        "/usr/local/bin/pip",
    ]
    pip = _run(tag, "pip --version")
    assert f"/usr/local/lib/python{minor}/" in pip
    assert f"(python {minor})" in pip
    version = _run(
        tag, 'echo "$PYTHON_VERSION"; python -c "import platform; print(platform.python_version())"'
    )
    declared, actual = version.split()
    assert declared == actual
    assert actual.startswith(minor + ".")
    assert (
        _run(tag, "ls /usr/lib/python3/dist-packages 2>/dev/null | grep -v __pycache__ || true")
        == ""
    )
    site = _run(tag, f"cd /usr/local/lib/python{minor}/site-packages && ls -d pip")
    assert site.strip() == "pip"
    assert "pip " in _run(tag, "python -m venv /tmp/v && /tmp/v/bin/pip --version")


async def test_a_task_that_upgrades_pip_and_pins_packaging_is_sound(tmp_path: Path) -> None:
    config = CheckConfig(runs=1, artifacts_dir=tmp_path / "artifacts")
    report = await check_tasks(
        [load_task(FIXTURE)], [], DockerBackend(), TestScriptGrader(), config
    )
    (check,) = report.checks
    assert check.problems == [], check.notes
    assert check.oracle_rewards == [1.0], check.notes
    assert check.nop_reward == 0.0
    assert check.verdict == "sound"
