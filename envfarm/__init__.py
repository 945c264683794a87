"""envfarm: sandboxed environments, agent sessions and graded trajectories for RL."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("envfarm")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
