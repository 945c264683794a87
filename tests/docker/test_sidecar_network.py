"""Compose sidecars get outbound network as under Harbor, whose compose services get the default
network, while the agent's container keeps envfarm's defaults (none unless the task asks); a job can
turn the sidecars' off, and a compose file keeps a sidecar in by putting it on ``internal: true``
networks only, as Docker Compose does. The fixture's sidecar installs its server's package from the
package index when it starts, through the package mirrors its image inherits from the host
(``images/hostconfig.py``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envfarm.check.pipeline import CheckConfig, check_tasks
from envfarm.grading.verifier.script import TestScriptGrader
from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.environment import DockerEnvironment
from envfarm.spec import load_task
from tests.plans import sandbox_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "sidecar-installs"
PYTHON = "python3"
CONNECT = "import socket; socket.create_connection(('192.0.2.1', 80), timeout=5)"


async def test_a_sidecar_that_installs_from_the_index_at_start_is_sound(tmp_path: Path) -> None:
    config = CheckConfig(runs=1, artifacts_dir=tmp_path / "artifacts")
    report = await check_tasks(
        [load_task(FIXTURE)], [], DockerBackend(), TestScriptGrader(), config
    )
    (check,) = report.checks
    assert check.infra == [], check.infra
    assert (check.oracle_rewards, check.nop_reward) == ([1.0], 0.0), (check.problems, check.notes)
    assert check.verdict == "sound", check.problems


@pytest.mark.parametrize("setting", ["public", "none"])
async def test_the_sidecars_reach_out_unless_turned_off_and_the_agent_never(
    tmp_path: Path, setting: str
) -> None:
    root = tmp_path / f"sidecar-{setting}"
    shutil.copytree(FIXTURE, root)
    compose = root / "environment" / "docker-compose.yaml"
    offline = compose.read_text().replace("pip install", "true").replace("import six; ", "")
    compose.write_text(offline.replace("six.__version__", "chr(49)"))  # no index needed
    task = load_task(root)
    backend = DockerBackend()
    spec = sandbox_spec(task, sidecar_network=setting)
    sandbox = backend.create(spec, await backend.prepare(spec), run_id=f"test-out-{setting}")
    assert isinstance(sandbox, DockerEnvironment)
    async with sandbox:
        kv = docker_client().containers.get(sandbox.sidecar_ids["kv"])
        inner = sandbox.main.config.network_name
        expected = {inner, f"{inner}-out"} if setting == "public" else {inner}
        assert set(kv.attrs["NetworkSettings"]["Networks"]) == expected
        out = await sandbox.exec(f"{PYTHON} -c {CONNECT!r}", timeout=30)
        assert out.exit_code != 0, out  # the agent's container: no route out
        assert "unreachable" in out.stderr, out.stderr
        main = docker_client().containers.get(sandbox.main.container_id)
        assert set(main.attrs["NetworkSettings"]["Networks"]) == {inner}


async def test_a_sidecar_on_internal_networks_only_stays_in_as_under_compose(
    tmp_path: Path,
) -> None:
    """``internal: true`` on every network a sidecar is on keeps it without outbound network,
    as Docker Compose does; a sidecar on a network that is not internal still reaches out."""
    root = tmp_path / "sidecar-internal"
    shutil.copytree(FIXTURE, root)
    serve = "mkdir -p /srv && echo 1 > /srv/version.txt && exec python -m http.server 8000 -d /srv"
    healthcheck = (
        "    healthcheck:\n"
        '      test: ["CMD", "python", "-c", "import socket; '
        "socket.create_connection(('localhost', 8000), timeout=2).close()\"]\n"
        "      interval: 1s\n      retries: 60\n"
    )
    (root / "environment" / "docker-compose.yaml").write_text(
        "services:\n"
        "  main:\n    build:\n      context: .\n    networks: [back, front]\n"
        "    depends_on:\n      kv:\n        condition: service_healthy\n"
        f"  kv:\n    build:\n      context: ./kv\n    command: [sh, -c, {serve!r}]\n"
        f"    networks: [back]\n{healthcheck}"
        f"  web:\n    build:\n      context: ./kv\n    command: [sh, -c, {serve!r}]\n"
        f"    networks: [back, front]\n{healthcheck}"
        "networks:\n  back:\n    internal: true\n  front: {}\n"
    )
    task = load_task(root)
    assert task.compose is not None
    assert (
        task.compose.services["kv"].internal_only,
        task.compose.services["web"].internal_only,
    ) == (True, False)
    backend = DockerBackend()
    spec = sandbox_spec(task, sidecar_network="public")
    sandbox = backend.create(spec, await backend.prepare(spec), run_id="test-out-internal")
    assert isinstance(sandbox, DockerEnvironment)
    async with sandbox:
        inner = sandbox.main.config.network_name
        kv = docker_client().containers.get(sandbox.sidecar_ids["kv"])
        assert set(kv.attrs["NetworkSettings"]["Networks"]) == {inner}
        web = docker_client().containers.get(sandbox.sidecar_ids["web"])
        assert set(web.attrs["NetworkSettings"]["Networks"]) == {inner, f"{inner}-out"}
        api = docker_client().api
        probe = api.exec_create(sandbox.sidecar_ids["kv"], ["python", "-c", CONNECT])
        output = api.exec_start(probe["Id"]).decode(errors="replace")
        assert api.exec_inspect(probe["Id"])["ExitCode"] != 0
        assert "No route to host" in output, output  # at once: no route, not a timeout
