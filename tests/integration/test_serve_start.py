"""What ``envfarm serve`` leaves behind and says at start, as a new user sees it."""

from __future__ import annotations

from pathlib import Path

from envfarm.paths import user_data_dir
from tests.integration.serve_process import ServeProcess

TASKS = Path(__file__).resolve().parents[2] / "tasks"


def test_serve_keeps_its_store_in_the_user_data_dir_and_logs_only_its_own_lines(
    tmp_path: Path,
) -> None:
    home, cwd = tmp_path / "home", tmp_path / "checkout"
    home.mkdir()
    cwd.mkdir()
    env = {"HOME": str(home), "XDG_DATA_HOME": "", "ENVFARM_DATA_DIR": ""}
    server = ServeProcess(cwd, "--tasks", str(TASKS), "--no-worker", env=env).start()
    assert server.stop() == 0
    output = server.output()
    assert (home / ".local" / "share" / "envfarm" / "envfarm.db").is_file()
    assert sorted(p.name for p in cwd.iterdir()) == ["serve.log"]  # the test's own log only
    lines = [line for line in output.splitlines() if line.strip()]
    assert lines, output
    assert all(line.startswith("envfarm: ") for line in lines), output
    assert "alembic" not in output.lower()


def test_the_data_dir_follows_envfarm_data_dir_then_xdg_then_home(tmp_path: Path) -> None:
    home = str(tmp_path)
    assert user_data_dir({"HOME": home}) == tmp_path / ".local/share/envfarm"
    assert user_data_dir({"HOME": home, "XDG_DATA_HOME": "/x"}) == Path("/x/envfarm")
    assert (
        user_data_dir({"HOME": home, "XDG_DATA_HOME": "rel"}) == tmp_path / ".local/share/envfarm"
    )
    explicit = {"HOME": home, "XDG_DATA_HOME": "/x", "ENVFARM_DATA_DIR": "/d"}
    assert user_data_dir(explicit) == Path("/d")
