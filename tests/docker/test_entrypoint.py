"""The image's ENTRYPOINT runs as Harbor's compose runs it: a control plane the entrypoint
starts is there for the solution and, in a clean room, for the verifier; its output goes to the
artifacts; an entrypoint that fails at start is a start error quoting what it said."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from envfarm.controller.episode import EpisodeRequest, EpisodeRunner
from envfarm.controller.policies import PolicySpec, open_policy
from envfarm.errors import SandboxStartError
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.sandbox.docker.sandbox import DockerSandbox, DockerSandboxConfig
from envfarm.spec.task import Task, load_task
from tests.plans import sandbox_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")

CONTROL = """import os, socket, sys
token = os.environ["CONTROL_TOKEN"]
server = socket.socket(socket.AF_UNIX)
server.bind("/run/control.sock")
os.chmod("/run/control.sock", 0o666)
server.listen()
print("control plane listening", flush=True)
while True:
    conn, _ = server.accept()
    question = conn.recv(100).decode()
    print("asked", question, flush=True)
    conn.sendall(f"{question}:{token}".encode())
    conn.close()
"""
ENTRYPOINT = """#!/bin/sh
python3 /opt/control.py &
exec "$@"
"""
ASK = (
    'python3 -c "import socket; s = socket.socket(socket.AF_UNIX); '
    "s.connect('/run/control.sock'); s.sendall(b'$1'); print(s.recv(200).decode())\""
)


def control_task(root: Path, mode: str) -> Task:
    token = uuid.uuid4().hex
    for sub in ("environment", "tests", "solution"):
        (root / sub).mkdir(parents=True)
    (root / "task.toml").write_text(
        f'[task]\nname = "test/{root.name}"\n'
        f'[verifier]\nenvironment_mode = "{mode}"\n'
        '[environment]\nworkdir = "/app"\nmemory_mb = 512\n'
    )
    (root / "instruction.md").write_text("Ask the control plane for a ticket.\n")
    (root / "environment" / "control.py").write_text(CONTROL)
    (root / "environment" / "entrypoint.sh").write_text(ENTRYPOINT)
    (root / "environment" / "Dockerfile").write_text(
        "FROM python:3.11-slim\n"
        f"ENV CONTROL_TOKEN={token}\n"
        "COPY control.py /opt/control.py\nCOPY entrypoint.sh /entrypoint.sh\n"
        "RUN chmod 0755 /entrypoint.sh && mkdir -p /app\nWORKDIR /app\n"
        'ENTRYPOINT ["/entrypoint.sh"]\n'
    )
    ask = f"ask() {{ {ASK}; }}\n"
    (root / "solution" / "solve.sh").write_text(f"{ask}ask ticket > /app/ticket\n")
    (root / "tests" / "test.sh").write_text(
        f"{ask}"
        f'[ "$(cat /app/ticket)" = "ticket:{token}" ] && '
        f'[ "$(ask verify)" = "verify:{token}" ] && echo 1 > /logs/verifier/reward.txt '
        "|| echo 0 > /logs/verifier/reward.txt\n"
    )
    return load_task(root)


@pytest.mark.parametrize("mode", ["shared", "clean"])
async def test_a_control_plane_started_by_the_entrypoint_serves_solution_and_verifier(
    tmp_path: Path, mode: str
) -> None:
    task = control_task(tmp_path / f"control-{mode}", mode)
    backend = DockerBackend()
    image = await backend.prepare(sandbox_spec(task))
    async with open_policy(PolicySpec(base_url="oracle")) as policy:
        runner = EpisodeRunner(
            backend=backend,
            policy=policy,
            grader=TestScriptGrader(),
            run_id="test-entrypoint",
            artifacts_dir=tmp_path / "artifacts",
        )
        trajectory = await runner.run(
            EpisodeRequest(task=task, image=image, job_id="j", group_id="g", episode_id="ep")
        )
    assert trajectory.error is None, trajectory.error
    assert trajectory.reward.value == 1.0, trajectory.reward
    processes = tmp_path / "artifacts" / "ep" / "processes"
    main_log = (processes / "main.log").read_text()
    assert "control plane listening" in main_log
    assert "asked ticket" in main_log
    if mode == "clean":
        verifier_log = (processes / "clean-room-1-main.log").read_text()
        assert "asked verify" in verifier_log
        assert "asked ticket" not in verifier_log
    else:
        assert "asked verify" in main_log


async def test_an_entrypoint_that_fails_at_start_is_a_start_error(
    tmp_path: Path, base_image: str
) -> None:
    from envfarm.sandbox.docker.client import docker_client

    tag = f"envfarm-test-entrypoint/failing:{uuid.uuid4().hex[:10]}"
    (tmp_path / "Dockerfile").write_text(
        f"FROM {base_image}\n"
        'ENTRYPOINT ["sh", "-c", "echo missing licence file >&2; exit 3", "--"]\n'
    )
    docker_client().images.build(
        path=str(tmp_path), tag=tag, labels={"io.envfarm.managed": "true"}, rm=True, forcerm=True
    )
    sandbox = DockerSandbox(DockerSandboxConfig(image=tag, run_id="test-entrypoint"))
    try:
        with pytest.raises(SandboxStartError) as caught:
            await sandbox.start()
    finally:
        await sandbox.stop()
        docker_client().images.remove(tag, force=True)
    message = str(caught.value)
    assert "exit code 3" in message
    assert "echo missing licence file" in message
    assert "missing licence file" in message.splitlines()[-1]
