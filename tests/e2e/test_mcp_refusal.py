"""An installed agent whose spec cannot take MCP servers is refused for a task that declares
them, before anything is built, as Harbor refuses an agent without MCP support."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "tasks" / "mcp-sidecar"


def test_an_agent_without_mcp_support_is_not_run_on_an_mcp_task(tmp_path: Path) -> None:
    spec = tmp_path / "no-mcp.toml"
    spec.write_text('name = "no-mcp"\nversion = "1"\n[run]\ncommand = "true"\n')
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "envfarm",
            "run",
            str(FIXTURE),
            "--agent-spec",
            str(spec),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2, output
    assert "not run: fixtures/mcp-sidecar" in output
    assert "agent no-mcp cannot use them" in output
