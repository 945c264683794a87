"""scripts/docker-btrfs on this machine, with its files redirected into a temporary directory:
a btrfs loop file with quotas, daemon.json and fstab entries, idempotent, and a clear refusal
when Docker's storage is chosen already. (The running dockerd is never touched.)"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "docker-btrfs"


def run_script(tmp: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "ENVFARM_DOCKER_BTRFS_DIR": str(tmp / "envfarm"),
        "ENVFARM_DOCKER_DAEMON_JSON": str(tmp / "daemon.json"),
        "ENVFARM_FSTAB": str(tmp / "fstab"),
        "ENVFARM_DOCKER_BTRFS_GB": "8",
        **extra,
    }
    return subprocess.run([str(SCRIPT)], env=env, capture_output=True, text=True, timeout=300)


def test_a_storage_choice_in_daemon_json_is_left_alone_with_a_warning(tmp_path: Path) -> None:
    chosen = {"storage-driver": "overlay2", "runtimes": {}}
    (tmp_path / "daemon.json").write_text(json.dumps(chosen))
    result = run_script(tmp_path)
    assert result.returncode == 0
    assert "already chooses Docker's storage" in result.stderr
    assert "disk limits will NOT be enforced" in result.stderr
    assert json.loads((tmp_path / "daemon.json").read_text()) == chosen
    assert not (tmp_path / "envfarm").exists()


def test_creates_mounts_and_configures_a_btrfs_data_root_once(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("scripts/docker-btrfs mounts a loop file: run this test as root")
    (tmp_path / "daemon.json").write_text(json.dumps({"runtimes": {"runsc": {}}}))
    root = tmp_path / "envfarm" / "docker"
    image = tmp_path / "envfarm" / "docker-btrfs.img"
    try:
        first = run_script(tmp_path)
        assert first.returncode == 0, first.stderr
        assert "WARNING" not in first.stderr, first.stderr
        config = json.loads((tmp_path / "daemon.json").read_text())
        assert config == {
            "runtimes": {"runsc": {}},
            "data-root": str(root),
            "storage-driver": "btrfs",
        }
        fs = subprocess.run(["stat", "-f", "-c", "%T", str(root)], capture_output=True, text=True)
        assert fs.stdout.strip() == "btrfs"
        quotas = subprocess.run(["btrfs", "qgroup", "show", str(root)], capture_output=True)
        assert quotas.returncode == 0, "quotas are not enabled"
        assert image.stat().st_size == 8 << 30
        assert image.stat().st_blocks * 512 < 1 << 30  # sparse

        second = run_script(tmp_path)
        assert (second.returncode, second.stdout, second.stderr) == (0, "", "")
        fstab = (tmp_path / "fstab").read_text().splitlines()
        assert fstab == [f"{image} {root} btrfs loop,noatime,discard=async,nofail 0 0"]
    finally:
        subprocess.run(["umount", str(root)], capture_output=True)
        image.unlink(missing_ok=True)
