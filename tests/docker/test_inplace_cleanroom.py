"""The clean room in place (``grading/cleanroom/inplace.py``) on the real engine: the agent's
container, swept by its helper or restarted, grades as a fresh one would, by the helper's own
listing; it falls back to a fresh container when a watched or test file changed, and hands the
verifier nothing carrying leaves out, whatever the agent planted where a restart would empty it."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_asyncio

from envfarm.models.trajectory import Trajectory
from envfarm.sandbox.docker.backend import DockerBackend
from tests.docker.grading_tasks import FIXED_CALC, bash, make_task, run_episode

pytestmark = pytest.mark.asyncio(loop_scope="session")

FIX = f"cat > /app/calc.py <<'PY'\n{FIXED_CALC}PY"
SHARED = 'environment_mode = "shared"'
# the fix as bytecode only: an unchecked-hash .pyc is imported without looking at calc.py
PLANT_BYTECODE = (
    f"mkdir -p /tmp/fixed && cat > /tmp/fixed/calc.py <<'PY'\n{FIXED_CALC}PY\n"
    "python - <<'PY'\n"
    "import importlib.util, py_compile\n"
    "target = importlib.util.cache_from_source('/app/calc.py')\n"
    "py_compile.compile('/tmp/fixed/calc.py', cfile=target,\n"
    "    invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)\n"
    "PY\nrm -rf /tmp/fixed"
)
FAKE_FIND = "printf '#!/bin/sh\\nexit 0\\n' > /usr/bin/find && chmod +x /usr/bin/find"


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def backend() -> DockerBackend:
    return DockerBackend()


def in_place(trajectory: Trajectory, route: str = "sweep") -> bool:
    """Graded in the agent's container, swept (no engine restart) or restarted."""
    phases = trajectory.timings.phases
    assert "sweep" in phases, phases
    assert ("restart" in phases) == (route == "restart"), phases
    return "carry" not in phases and "fork" not in phases  # no capture for a fresh container


async def test_a_fix_outside_the_workdir_is_graded_in_place(
    backend: DockerBackend, tmp_path: Path
) -> None:
    test_sh = (
        "grep -q granted /etc/agent-grant || { echo 0 > /logs/verifier/reward.txt; exit 0; }\n"
        "[ -e /solution ] && { echo 0 > /logs/verifier/reward.txt; exit 0; }\n"
        "echo 1 > /logs/verifier/reward.txt\n"
    )
    steps = [bash("echo granted > /etc/agent-grant && mkdir -p /solution && touch /solution/x")]
    task = make_task(tmp_path / "outside", test_sh=test_sh)
    graded = await run_episode(backend, task, steps, episode_id="ep-outside")
    assert (graded.reward.valid, graded.reward.value) == (True, 1.0), graded.reward
    assert in_place(graded)


async def test_planted_bytecode_never_reaches_the_verifier(
    backend: DockerBackend, tmp_path: Path
) -> None:
    shared = make_task(tmp_path / "pyc-shared", verifier=SHARED)
    hacked = await run_episode(backend, shared, [bash(PLANT_BYTECODE)], episode_id="ep-pyc-s")
    assert (hacked.reward.valid, hacked.reward.value) == (True, 1.0)  # it works where it lies

    clean = make_task(tmp_path / "pyc-clean")
    graded = await run_episode(backend, clean, [bash(PLANT_BYTECODE)], episode_id="ep-pyc-c")
    assert (graded.reward.valid, graded.reward.value) == (True, 0.0), graded.reward
    assert in_place(graded)


async def test_a_fake_find_cannot_hide_an_edited_test_file(
    backend: DockerBackend, tmp_path: Path
) -> None:
    edit = "printf 'def test_mul_visible():\\n    pass\\n' > /app/tests/test_visible.py"
    test_sh = (
        "cd /app && python -m pytest tests -p no:cacheprovider -q; s=$?\n"
        "[ $s -eq 0 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    )
    breaks_mul = "sed -i 's/a \\* b/a + b + 1/' /app/calc.py"
    steps = [bash(f"{breaks_mul} && {edit} && {FAKE_FIND}")]
    task = make_task(tmp_path / "fake-find", test_sh=test_sh)
    graded = await run_episode(backend, task, steps, episode_id="ep-fake-find")
    assert not in_place(graded)  # the helper's listing saw the edited test: it needs the image's
    # the fresh container ran the image's test (mul is broken), or grading failed on the fake
    # find: never the edited test's pass
    assert graded.reward.value != 1.0, graded.reward


async def test_the_same_grade_in_place_and_in_a_fresh_container(tmp_path: Path) -> None:
    steps = [bash(FIX), bash("echo note > /etc/agent-note")]
    rewards = []
    for restart in (True, False):
        task = make_task(tmp_path / f"same-{restart}")
        graded = await run_episode(
            DockerBackend(),
            task,
            steps,
            episode_id=f"ep-same-{restart}",
            settings={"clean_room": "restart" if restart else "fresh"},
        )
        if restart:
            assert in_place(graded)
        else:
            assert "fork" in graded.timings.phases
        rewards.append((graded.reward.valid, graded.reward.value, sorted(graded.reward.flags)))
    assert rewards[0] == rewards[1]
    assert rewards[0][:2] == (True, 1.0)


async def test_a_restart_where_the_sweep_cannot_stand_for_one_grades_the_same(
    backend: DockerBackend, tmp_path: Path
) -> None:
    """A planted reward file in a tmpfs is flagged and emptied either way; a changed ``/dev``
    sends grading to an engine restart, with the same grade."""
    plant = "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt; echo 1 > /dev/shm/r"
    outcomes = []
    for route, extra in (("sweep", "true"), ("restart", "touch /dev/planted")):
        task = make_task(tmp_path / route)
        steps = [bash(FIX), bash(plant), bash(extra)]
        graded = await run_episode(backend, task, steps, episode_id=f"ep-route-{route}")
        assert in_place(graded, route)
        outcomes.append((graded.reward.valid, graded.reward.value, sorted(graded.reward.flags)))
    assert outcomes[0] == outcomes[1], outcomes
    assert outcomes[0][0], outcomes
    assert outcomes[0][2], outcomes  # the planted reward is flagged
