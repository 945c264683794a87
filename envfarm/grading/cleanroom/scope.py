"""Which paths of the agent's file system a clean-room verifier may receive (``carry.py``).

The clean room carries every path the agent added, modified or deleted anywhere in its
container's own file system, as ``shared`` grading would see it, except:

- *left out* (never carried, never deleted, not flagged here): envfarm's own paths (the helper's
  directory, ``/opt/envfarm``, ``/installed-agent``, envfarm's temporary files), mounts (``/proc``,
  ``/sys``, ``/dev``, ``/etc/hosts``, volumes: the verifier shares those anyway), the hidden paths
  (``/tests``, ``/solution``, ``/logs``: reward files and planted tests are the tamper snapshot's
  to flag, and the verifier's own copies are uploaded at grading) and caches (``__pycache__``...);
- *withheld* (restored as the image has them, and flagged ``tamper:carry_withheld``): what decides
  what a test run means, the paths the tamper snapshot watches: interpreters and test runners in
  a ``bin`` directory (``python*``, ``pytest*``, ``py.test``), interpreter start-up hooks
  (``sitecustomize.py``, ``usercustomize.py`` anywhere, ``*.pth`` in a site directory,
  ``/etc/ld.so.preload``), the installed ``pytest``, ``_pytest``, ``pluggy``
  of a site directory, ``entry_points.txt`` files that register a ``pytest11`` plugin, and
  pytest's files (``conftest.py``, ``pytest.py``, its configuration files) in the workdir's
  ancestors;
- *restored* test files: those of the workdir that existed before the agent (the names tamper
  detection watches, ``test_*.py``, anything under ``tests/``...), with the directories above them.

The rules are the host's and read only names: the agent's tools are not trusted to apply them.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from envfarm.grading.tamper.inspection import is_test_file

CACHE_NAMES = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
LEFT_OUT_ROOTS = (
    "proc",
    "sys",
    "dev",
    ".envfarm",
    "opt/envfarm",
    "installed-agent",
    "tests",
    "solution",
    "logs",
)
LEFT_OUT_GLOBS = ("tmp/.envfarm-*", "root/.envfarm-*")
_GLOB_PREFIXES = tuple(glob.partition("*")[0] for glob in LEFT_OUT_GLOBS)
_BIN_NAMES = ("python*", "pytest*", "py.test")
_HOOK_NAMES = frozenset({"sitecustomize.py", "usercustomize.py"})
_RUNNER_NAMES = frozenset({"pytest", "_pytest", "pluggy", "pytest.py", "py.py", "pluggy.py"})
_PYTEST_FILES = frozenset(
    {"conftest.py", "pytest.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg"}
)
_SITE_DIR_NAMES = frozenset({"site-packages", "dist-packages"})


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


@dataclass
class CarryScope:
    """The rules for one episode. Paths are relative to ``/`` (``etc/passwd``)."""

    workdir: str
    """Absolute, resolved."""
    sites: list[str] = field(default_factory=list)
    """Site directories (absolute) as the tamper snapshot found them before the agent."""
    plugin_files: set[str] = field(default_factory=set)
    """``entry_points.txt`` files (absolute) that register a pytest plugin, after the agent."""
    mounts: list[str] = field(default_factory=list)
    """Mount points (relative) of the agent's container."""

    def __post_init__(self) -> None:
        self._work = self.workdir.strip("/")
        self._sites = {s.strip("/") for s in self.sites if s.strip("/")}
        self._ancestors: set[str] = set()
        parts = self._work.split("/") if self._work else []
        self._ancestors = {"/".join(parts[:i]) for i in range(len(parts))}
        self._mounts = [m.strip("/") for m in self.mounts if m.strip("/")]
        self._left_out_exact = frozenset(LEFT_OUT_ROOTS) | frozenset(self._mounts)
        self._left_out_below = tuple(r + "/" for r in self._left_out_exact)

    def left_out(self, path: str) -> bool:
        """Called for every entry of two listings: cheap tests first (the same rules as
        ``LEFT_OUT_ROOTS``, ``LEFT_OUT_GLOBS``, ``CACHE_NAMES`` and the mounts)."""
        if path in self._left_out_exact or path.startswith(self._left_out_below):
            return True
        if path.startswith(_GLOB_PREFIXES) and any(fnmatchcase(path, g) for g in LEFT_OUT_GLOBS):
            return True
        return any(name in path for name in CACHE_NAMES) and bool(
            CACHE_NAMES.intersection(path.split("/"))
        )

    def _site_of(self, path: str) -> str | None:
        """The site directory ``path`` lies in (its deepest), if any."""
        parent = posixpath.dirname(path)
        while parent:
            if parent in self._sites or posixpath.basename(parent) in _SITE_DIR_NAMES:
                return parent
            parent = posixpath.dirname(parent)
        return None

    def withheld(self, path: str) -> str | None:
        """Why ``path`` must not be carried (it is a watched path), or None."""
        name = posixpath.basename(path)
        parent = posixpath.dirname(path)
        if name in _HOOK_NAMES:
            return "interpreter start-up hook"
        if path == "etc/ld.so.preload":
            return "preload list"
        if posixpath.basename(parent) in ("bin", "sbin") and any(
            fnmatchcase(name, p) for p in _BIN_NAMES
        ):
            return "interpreter or test runner"
        site = self._site_of(path)
        if site is not None:
            inside = path[len(site) + 1 :].split("/")
            if len(inside) == 1 and name.endswith(".pth"):
                return "site .pth file"
            if inside[0] in _RUNNER_NAMES:
                return "installed test runner"
            if name == "entry_points.txt" and "/" + path in self.plugin_files:
                return "pytest plugin registration"
        if parent in self._ancestors and name in _PYTEST_FILES | {"pyproject.toml"}:
            return "pytest file above the workdir"
        return None

    def test_file(self, path: str) -> bool:
        """A test file of the workdir (restored when the agent changed or deleted it)."""
        if not self._work:
            return is_test_file(path)
        if not path.startswith(self._work + "/"):
            return False
        return is_test_file(path[len(self._work) + 1 :])
