"""The healthcheck window: one shell that repeats a check, run here by the local /bin/sh."""

from __future__ import annotations

import subprocess
from pathlib import Path

from envfarm.sandbox.health import windowed


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def test_the_window_returns_at_the_first_pass(tmp_path: Path) -> None:
    tries = tmp_path / "tries"
    check = f'echo x >> {tries}; [ "$(wc -l < {tries})" -ge 3 ]'
    done = run(windowed(["/bin/sh", "-c", check], window_s=30))
    assert done.returncode == 0
    assert tries.read_text().count("x") == 3


def test_a_check_that_never_passes_ends_the_window_with_its_last_run(tmp_path: Path) -> None:
    tries = tmp_path / "tries"
    check = f"echo x >> {tries}; echo warming up >&2; exit 3"
    done = run(windowed(["/bin/sh", "-c", check], window_s=1))
    assert done.returncode == 3
    assert done.stdout == "warming up"
    assert tries.read_text().count("x") >= 2


def test_arguments_reach_the_check_as_they_are(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    argv = ["/bin/sh", "-c", f'printf "%s|" "$@" > {seen}', "sh", "a b", "it's", "$HOME"]
    assert run(windowed(argv, window_s=1)).returncode == 0
    assert seen.read_text() == "a b|it's|$HOME|"
