"""Clean-room grading on the real engine: the verifier runs in a fresh container that receives
the agent's file system changes but the watched paths (and declared artifacts), or in the
agent's container restarted when nothing needs the image's copy (``test_inplace_cleanroom.py``);
sidecars carry over."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import pytest_asyncio

from envfarm.sandbox.docker.backend import DockerBackend
from envfarm.sandbox.docker.networks import bridge_gateway
from envfarm.spec.task import load_task
from envfarm.testing.scripted import Step
from tests.docker.grading_tasks import (
    FIXED_CALC,
    JUNIT,
    REWARD_FROM_STATUS,
    TESTS_IN_PLACE,
    bash,
    make_task,
    run_episode,
)
from tests.docker.test_phase_network import make_task as make_phase_task
from tests.docker.test_phase_network import run_oracle

pytestmark = pytest.mark.asyncio(loop_scope="session")

REPO = Path(__file__).resolve().parents[2]
FIX = f"cat > /app/calc.py <<'PY'\n{FIXED_CALC}PY"
SHARED = 'environment_mode = "shared"'
PASS_EVERYTHING_PLUGIN = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""
# planted in site-packages: every python started afterwards loads the plugin into pytest
STARTUP_HOOK = "import os; os.environ['PYTEST_PLUGINS'] = 'envfarm_forge'\n"
FAKE_PYTEST = """#!/bin/sh
cat > /logs/verifier/junit.xml <<'XML'
<testsuite tests="2"><testcase classname="test_calc" name="test_add"/>\
<testcase classname="test_calc" name="test_mul"/></testsuite>
XML
echo '2 passed in 0.01s'
"""
TESTS_BY_PYTEST_BINARY = (
    f"cd /app\nPYTHONPATH=/app pytest /tests --rootdir=/tests -p no:cacheprovider -rA {JUNIT}\n"
    + REWARD_FROM_STATUS
)


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def backend() -> DockerBackend:
    return DockerBackend()


def site_packages(name: str, text: str) -> str:
    return (
        "d=$(python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])') && "
        f"cat > $d/{name} <<'EOF'\n{text}EOF"
    )


PLANT_STARTUP_HOOK: list[Step] = [
    bash(site_packages("envfarm_forge.py", PASS_EVERYTHING_PLUGIN)),
    bash(site_packages("envfarm_forge.pth", STARTUP_HOOK)),
]
PLANT_PYTEST: list[Step] = [
    bash(f"cat > /usr/local/bin/pytest <<'EOF'\n{FAKE_PYTEST}EOF\nchmod +x /usr/local/bin/pytest")
]


@pytest.mark.parametrize(
    ("name", "steps", "test_sh", "flag"),
    [
        ("startup-hook", PLANT_STARTUP_HOOK, None, "tamper:pth_file"),
        ("fake-pytest", PLANT_PYTEST, TESTS_BY_PYTEST_BINARY, "tamper:interpreter_modified"),
    ],
)
async def test_what_the_agent_plants_outside_the_workdir_never_reaches_the_verifier(
    backend: DockerBackend,
    tmp_path: Path,
    name: str,
    steps: list[Step],
    test_sh: str | None,
    flag: str,
) -> None:
    script = test_sh or TESTS_IN_PLACE
    shared = make_task(tmp_path / f"{name}-shared", verifier=SHARED, test_sh=script)
    hacked = await run_episode(backend, shared, steps, episode_id=f"ep-{name}-shared")
    assert (hacked.reward.valid, hacked.reward.value) == (True, 1.0)  # in the agent's container
    assert flag in hacked.reward.flags

    clean = make_task(tmp_path / f"{name}-clean", test_sh=script)
    graded = await run_episode(backend, clean, steps, episode_id=f"ep-{name}-clean")
    assert (graded.reward.valid, graded.reward.value) == (True, 0.0), graded.reward
    assert flag in graded.reward.flags
    assert "tamper:carry_withheld" in graded.reward.flags
    # the watched path needs the image's copy: a fresh container, not the agent's swept
    assert {"sweep", "fork"} <= set(graded.timings.phases)
    statuses = {t.name: t.status for t in graded.reward.tests}
    assert statuses.get("test_calc::test_add") == "failed", graded.reward

    solved = await run_episode(backend, clean, [*steps, bash(FIX)], episode_id=f"ep-{name}-fix")
    assert (solved.reward.valid, solved.reward.value) == (True, 1.0)


async def test_a_process_the_agent_leaves_running_cannot_write_the_reward(
    backend: DockerBackend, tmp_path: Path
) -> None:
    task = make_task(tmp_path / "leftover")
    loop = "while :; do mkdir -p /logs/verifier; echo 1 >/logs/verifier/reward.txt; sleep 0.1; done"
    trajectory = await run_episode(
        backend, task, [bash(f"setsid nohup sh -c '{loop}' >/dev/null 2>&1 &\nsleep 0.3")]
    )
    assert (trajectory.reward.valid, trajectory.reward.value) == (True, 0.0)
    assert "tamper:reward_file_planted" in trajectory.reward.flags


CHECKS = r"""cd /app
fail() { echo "FAILED: $1"; echo 0 > /logs/verifier/reward.txt; exit 0; }
[ ! -e calc.py ] || fail "calc.py was renamed away"
grep -q 'a + b' calc2.py || fail "calc2.py holds the fix"
python3 -c "assert open('blob.bin','rb').read() == bytes(range(256)) * 4" || fail blob
[ "$(stat -c %a run.sh)" = 700 ] || fail "mode of run.sh"
[ "$(stat -c %u:%g owned.txt)" = 1000:1000 ] || fail "owner of owned.txt"
[ "$(readlink link.py)" = calc2.py ] || fail "link.py"
[ -d empty ] || fail "empty directory"
[ -e "$(printf 'caf\351.txt')" ] || fail "non-UTF-8 name"
grep -q 'assert mul(2, 2) == 4' tests/test_visible.py || fail "test file restored"
[ "$(git log --oneline | wc -l)" = 2 ] || fail "the agent's commit"
[ -e /usr/local/bin/agent-tool ] || fail "outside the workdir"
echo 1 > /logs/verifier/reward.txt
"""
CHANGES = [
    bash(FIX),
    bash("cd /app && git -c user.name=a -c user.email=a@a commit -qam fix && mv calc.py calc2.py"),
    bash("python3 -c \"open('/app/blob.bin','wb').write(bytes(range(256)) * 4)\""),
    bash("cd /app && printf '#!/bin/sh\\n' > run.sh && chmod 700 run.sh"),
    bash("cd /app && echo x > owned.txt && chown 1000:1000 owned.txt"),
    bash("cd /app && ln -s calc2.py link.py && mkdir empty && touch \"$(printf 'caf\\351.txt')\""),
    bash("echo 'def test_mul_visible(): pass' > /app/tests/test_visible.py"),
    bash("touch /usr/local/bin/agent-tool"),
]


async def test_every_kind_of_workdir_change_is_carried_and_test_files_are_restored(
    backend: DockerBackend, tmp_path: Path
) -> None:
    task = make_task(tmp_path / "carry", test_sh=CHECKS, git_history=True)
    artifacts = tmp_path / "artifacts"
    trajectory = await run_episode(backend, task, CHANGES, artifacts_dir=artifacts)
    stdout = (artifacts / "ep-grading" / "verifier" / "test-stdout.txt").read_text()
    assert (trajectory.reward.valid, trajectory.reward.value) == (True, 1.0), stdout
    received = json.loads((artifacts / "ep-grading" / "verifier-input.json").read_text())
    assert received["mode"] == "clean"
    assert received["restored"] == ["/app/tests/test_visible.py"]
    assert received["deleted"] == ["/app/calc.py"]
    carried = {"calc2.py", "blob.bin", "run.sh", "link.py", "empty"}
    assert {f"/app/{name}" for name in carried} | {"/usr/local/bin/agent-tool"} <= set(
        received["carried"]
    )
    assert (artifacts / "ep-grading" / "build.log").read_text().strip()


ARTIFACT_CHECK = r"""mkdir -p /logs/verifier
a=0; w=0
[ "$(cat /srv/out/result.txt 2>/dev/null)" = 42 ] && a=1
grep -q 'a + b' /app/calc.py && w=1
echo "{\"reward\": $a, \"artifact\": $a, \"workspace\": $w}" > /logs/verifier/reward.json
"""


@pytest.mark.parametrize(("mode", "workspace"), [("clean", 1.0), ("separate", 0.0)])
async def test_declared_artifacts_reach_clean_and_separate_verifiers(
    backend: DockerBackend, tmp_path: Path, mode: str, workspace: float
) -> None:
    task = make_task(
        tmp_path / f"artifact-{mode}",
        test_sh=ARTIFACT_CHECK,
        top='artifacts = ["/srv/out"]',
        verifier=f'environment_mode = "{mode}"',
    )
    steps = [bash(FIX), bash("mkdir -p /srv/out && echo 42 > /srv/out/result.txt")]
    trajectory = await run_episode(backend, task, steps, episode_id=f"ep-artifact-{mode}")
    assert trajectory.reward.valid, trajectory.reward
    assert trajectory.reward.components == {
        "reward": 1.0,
        "artifact": 1.0,
        "workspace": workspace,
    }


async def test_a_migration_is_graded_through_the_carried_over_database(
    backend: DockerBackend,
) -> None:
    task = load_task(REPO / "tasks" / "pg-schema-migration")
    assert task.solution_dir is not None
    migration = (task.solution_dir / "002_split_customer_name.sql").read_text()
    # the database is migrated by hand; no migration file is left in the workdir
    steps = [bash(f"psql -v ON_ERROR_STOP=1 <<'SQL'\n{migration}SQL")]
    trajectory = await run_episode(backend, task, steps, episode_id="ep-migration")
    statuses = {t.name.rpartition("::")[2]: t.status for t in trajectory.reward.tests}
    assert trajectory.reward.valid, trajectory.reward
    assert statuses["test_columns_and_constraints"] == "passed"
    assert statuses["test_existing_rows_are_backfilled"] == "passed"
    assert statuses["test_the_view_shows_full_names"] == "passed"
    assert statuses["test_the_migration_file_exists_and_is_recorded_as_applied"] == "failed"
    assert statuses["test_the_migration_replays_on_other_data"] == "failed"
    assert trajectory.reward.value == 0.0


class Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def outside() -> Iterator[str]:
    """``host:port`` of an HTTP server on the default bridge's gateway (test_phase_network)."""
    gateway = bridge_gateway()
    server = ThreadingHTTPServer((gateway, 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"{gateway}:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("agent", "verifier", "sidecar"),
    [
        ("no-network", "public", True),
        ("public", "no-network", True),
        ("no-network", "public", False),
    ],
)
async def test_the_fresh_verifier_container_gets_the_verifier_phase_network(
    tmp_path: Path, outside: str, agent: str, verifier: str, sidecar: bool
) -> None:
    shared = make_phase_task(
        tmp_path / "phase", outside, agent=agent, verifier=verifier, sidecar=sidecar
    )
    config = shared.root / "task.toml"
    config.write_text(config.read_text().replace('"shared"', '"clean"'))
    seen = await run_oracle(load_task(shared.root))
    public = verifier == "public"
    assert (seen["verifier_outside"], seen["verifier_route"]) == (public, public)
    assert seen["verifier_sidecar"] == int(sidecar)
    assert seen["agent_outside"] == (agent == "public")
