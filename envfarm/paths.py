"""Where envfarm keeps state that is not a run's output: the per-user data directory.

``envfarm serve`` and ``envfarm worker`` keep their default SQLite store and grading artifacts
there, and the example trainer its checkpoint, so nothing lands in the directory they are
started from (a checkout, say). ``ENVFARM_DATA_DIR`` overrides it, else
``$XDG_DATA_HOME/envfarm``, else ``~/.local/share/envfarm`` (the XDG base directory default).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from envfarm.settings import Settings


def user_data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The data directory (not created here)."""
    env = os.environ if environ is None else environ
    if (explicit := Settings.from_env(env).data_dir) is not None:
        return explicit
    xdg = env.get("XDG_DATA_HOME")
    if xdg and Path(xdg).is_absolute():  # the spec says to ignore a relative one
        return Path(xdg) / "envfarm"
    return Path(env.get("HOME") or Path.home()) / ".local" / "share" / "envfarm"


def user_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """envfarm's cache directory: ``$XDG_CACHE_HOME/envfarm``, else ``~/.cache/envfarm``."""
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_CACHE_HOME")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "envfarm"
    return Path(env.get("HOME") or Path.home()) / ".cache" / "envfarm"
