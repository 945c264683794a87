"""``run.json`` keeps a run's options, and the settings its flags or environment chose (offline
image sources, the verifier's network default), so ``--resume`` runs with them as its flags."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest

from envfarm.cli.resume import MANIFEST, load_manifest, save_manifest
from envfarm.settings import OFFLINE_ENV, VERIFIER_NETWORK_ENV, Settings
from envfarm.store.engine import STORE_FILE


def saved_run(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    (out / STORE_FILE).write_bytes(b"")
    params = {"paths": ("tasks",), "api_key": "secret", "concurrency": 3, "offline": None}
    save_manifest(out, params, Settings.from_env())
    return out


def load(out: Path) -> dict[str, object]:
    with click.Context(click.Command("run")):
        return load_manifest(out, {"api_key": "again"})


def test_the_offline_and_verifier_network_settings_come_back_on_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(OFFLINE_ENV, "1")
    monkeypatch.setenv(VERIFIER_NETWORK_ENV, "none")
    out = saved_run(tmp_path)
    assert "secret" not in (out / MANIFEST).read_text()
    monkeypatch.delenv(OFFLINE_ENV)
    monkeypatch.delenv(VERIFIER_NETWORK_ENV)
    params = load(out)
    assert (params["concurrency"], params["api_key"]) == (3, "again")
    assert params["offline"] is True
    assert params["verifier_network"] == "none"
    assert not Settings.from_env().offline  # given back as flags, never written to os.environ


def test_a_manifest_from_before_the_settings_were_kept_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(OFFLINE_ENV, raising=False)
    monkeypatch.delenv(VERIFIER_NETWORK_ENV, raising=False)
    out = saved_run(tmp_path)
    manifest = json.loads((out / MANIFEST).read_text())
    del manifest["settings"]
    (out / MANIFEST).write_text(json.dumps(manifest))
    params = load(out)
    assert (params["offline"], params["verifier_network"]) == (None, None)


def test_a_bad_setting_is_an_error_naming_the_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(VERIFIER_NETWORK_ENV, raising=False)
    out = saved_run(tmp_path)
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["settings"]["verifier_network"] = "bridge"
    (out / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(click.BadParameter, match=r"run\.json: unreadable"):
        load(out)
