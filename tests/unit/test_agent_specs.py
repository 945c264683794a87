"""Agent specs: the shipped ones parse and say how they install; bad specs name their field."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfarm.agent.specs import (
    BUILTIN,
    agent_names,
    builtin_specs,
    parse_spec,
    resolve_agent,
)
from envfarm.errors import TaskSpecError
from envfarm.sandbox.base import PreparedImage
from envfarm.sandbox.images.agent_layer import AGENT_DIR


def test_the_shipped_agents_are_listed_after_the_builtin_loop() -> None:
    assert agent_names() == [BUILTIN, "codex", "mini-swe-agent"]
    assert resolve_agent(None) is None
    assert resolve_agent(BUILTIN) is None


def test_an_unknown_agent_is_refused_with_the_list() -> None:
    with pytest.raises(TaskSpecError, match="codex, mini-swe-agent"):
        resolve_agent("nope")


def test_codex_installs_its_pinned_npm_package_and_runs_its_native_binary() -> None:
    codex = builtin_specs()["codex"]
    assert codex.api == "responses"
    assert codex.install.runtime == "none"
    layer = codex.layer()
    assert layer.npm == [f"@openai/codex@{codex.version}"]
    assert layer.shared_script == ""
    assert "{agent_dir}" not in layer.script
    assert f"{AGENT_DIR}/bin/codex --version" in layer.script
    command = codex.fill(
        codex.run.command,
        instruction="fix it; don't stop",
        base_url="http://127.0.0.1:4000/v1",
        model="policy",
        workdir="/app",
    )
    assert 'base_url="http://127.0.0.1:4000/v1"' in command
    assert 'wire_api="responses"' in command
    assert "'fix it; don'\"'\"'t stop'" in command  # the instruction, shell-quoted
    assert command.endswith("< /dev/null")


def test_a_pip_agent_shares_its_virtualenv_and_checks_it_in_the_task_image() -> None:
    mini = builtin_specs()["mini-swe-agent"]
    layer = mini.layer()
    assert layer.npm == []
    assert "pip install --no-cache-dir -q --disable-pip-version-check mini-swe-agent==" in (
        layer.shared_script
    )
    # in the task's layer, the copied virtualenv is redone only when python3 differs
    check, redo = layer.script.index("sys.version"), layer.script.index("python3 -m venv")
    assert check < redo


def test_the_layer_key_changes_with_what_is_installed() -> None:
    image = PreparedImage(tag="t", image_id="sha256:1")
    codex = builtin_specs()["codex"]
    other = codex.model_copy(update={"install": codex.install.model_copy(update={"npm": ["x@1"]})})
    assert codex.layer().key(image) != other.layer().key(image)
    assert codex.layer().key(image) != codex.layer().key(PreparedImage(tag="t", image_id="2"))


def test_a_bad_spec_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(TaskSpecError, match=r"install\.runtime"):
        parse_spec(
            {"name": "x", "version": "1", "install": {"runtime": "ruby"}, "run": {"command": "x"}},
            "my.toml",
        )
    with pytest.raises(TaskSpecError, match="run"):
        parse_spec({"name": "x", "version": "1"}, "my.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = [")
    with pytest.raises(TaskSpecError, match="not valid TOML"):
        resolve_agent(None, bad)
