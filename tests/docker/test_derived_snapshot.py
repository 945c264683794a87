"""The second tamper snapshot's workspace, derived from the clean room's capture, is the one the
snapshot script would have taken; planted files are still flagged and withheld, files changed
outside the workdir still carried."""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
from pathlib import Path

import pytest

from envfarm.grading.cleanroom.carry import list_workspace, read_changes, settle_carry
from envfarm.grading.cleanroom.derived import derivable, derive_workspace
from envfarm.grading.cleanroom.scope import CarryScope
from envfarm.grading.tamper.inspection import inspect_snapshots
from envfarm.grading.tamper.snapshot import take_snapshot
from envfarm.grading.tamper.workspace import export_changed
from envfarm.sandbox.docker.backend import DockerBackend
from tests.docker.grading_tasks import FIXED_CALC, bash, make_task, run_episode
from tests.plans import sandbox_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")

AGENT = " && ".join(
    [
        "cd /app",
        f"cat > calc.py <<'PY'\n{FIXED_CALC}PY\ntrue",
        "echo new > added.txt",
        "rm tests/test_visible.py",
        "ln -s calc.py link.py",
        "head -c 9000000 /dev/zero > big.bin",
        "mkdir -p .git node_modules/x && echo x > .git/HEAD && echo y > node_modules/x/i.js",
        "echo 'def test_x(): pass' > tests/test_new.py",
        "d=$(python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')",
        "echo 'import os' > $d/sitecustomize.py",
        "echo note > /etc/agent-note",
    ]
)


def _names(archive: bytes | None) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(archive or b"")) as tar:
        for member in tar:
            extracted = tar.extractfile(member) if member.isfile() else None
            found[member.name.removeprefix("./")] = extracted.read() if extracted else b""
    return found


async def test_the_derived_workspace_is_the_one_the_script_takes(tmp_path: Path) -> None:
    task = make_task(tmp_path / "derived")
    backend = DockerBackend()
    sandbox = backend.create(
        sandbox_spec(task), await backend.prepare(sandbox_spec(task)), run_id="test-derived"
    )
    async with sandbox:
        before, listing = await asyncio.gather(
            take_snapshot(sandbox, "/app"), list_workspace(sandbox, "/app")
        )
        assert derivable(before, listing)
        result = await sandbox.exec(AGENT, user="root", timeout=120)
        assert result.exit_code == 0, result.stderr
        partial, changes = await asyncio.gather(
            take_snapshot(sandbox, None, before=before, derive_workspace=True),
            read_changes(sandbox, listing),
        )
        full = await take_snapshot(sandbox, None, before=before)
        assert partial.workspace_derived
        assert not partial.section("workspace")
        derived = derive_workspace(before, partial, listing, changes)
        assert derived is not None
        assert derived.snapshot.sections == full.sections
        workspace = derived.snapshot.section("workspace")
        assert workspace["/app/big.bin"].startswith("B:9000000:")
        assert workspace["/app/link.py"].startswith("L:")
        assert not [p for p in workspace if "/.git/" in p or "/node_modules/" in p]

        inspection = inspect_snapshots(before, derived.snapshot)
        assert inspection == inspect_snapshots(before, full)
        flags = dict(inspection.flags)
        assert flags["tamper:sitecustomize"].endswith("-packages/sitecustomize.py")
        assert flags["tamper:tests_modified"] == "tests/test_visible.py"
        changed = inspection.workspace.changed() if inspection.workspace else []
        assert set(changed) == {"calc.py", "added.txt", "link.py", "big.bin", "tests/test_new.py"}
        ours = _names(derived.changed_tar(changed))
        theirs = _names(await export_changed(sandbox, "/app", changed))
        assert ours == theirs
        assert ours["calc.py"] == FIXED_CALC.encode()

        scope = CarryScope(workdir="/app", sites=before.sites, mounts=listing.mounts)
        carry = settle_carry(listing, changes, scope)
        assert "etc/agent-note" in carry.carried
        assert "app/calc.py" in carry.carried
        withheld = dict(carry.withheld)
        assert [p for p in withheld if p.endswith("-packages/sitecustomize.py")]
        assert not [p for p in carry.carried if p.endswith("sitecustomize.py")]


async def test_an_episode_with_the_derived_snapshot_flags_and_withholds_a_planted_file(
    tmp_path: Path,
) -> None:
    task = make_task(tmp_path / "derived-episode")
    artifacts = tmp_path / "artifacts"
    trajectory = await run_episode(
        # a fresh clean room: the derived snapshot is that route's
        DockerBackend(),
        task,
        [bash(AGENT)],
        episode_id="ep",
        settings={"clean_room": "fresh"},
        artifacts_dir=artifacts,
    )
    assert trajectory.error is None, trajectory.error
    assert (trajectory.reward.valid, trajectory.reward.value) == (True, 1.0)
    assert "snapshot_derive" in trajectory.timings.phases
    assert "changed_export" in trajectory.timings.phases
    assert {"tamper:sitecustomize", "tamper:carry_withheld", "tamper:tests_modified"} <= set(
        trajectory.reward.flags
    )
    received = json.loads((artifacts / "ep" / "verifier-input.json").read_text())
    assert "/etc/agent-note" in received["carried"]
    assert not [p for p in received["carried"] if p.endswith("sitecustomize.py")]
    assert [p for p, _ in received["withheld"] if p.endswith("-packages/sitecustomize.py")]
    diff = (artifacts / "ep" / "workspace" / "diff.patch").read_text()
    assert "+    return a + b" in diff
    assert "+new" in diff
