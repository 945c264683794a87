"""The browser viewer of runs and jobs: pages rendered on the server, charts as inline SVG.

``envfarm view RUN_DIR...`` serves it for run directories; ``envfarm serve`` mounts it at
``/ui`` for its jobs. It reads, never writes. docs/viewer.md describes it.
"""

from envfarm.viewer.app import create_viewer
from envfarm.viewer.sources import DirCatalog, JobCatalog, JobReader

__all__ = ["DirCatalog", "JobCatalog", "JobReader", "create_viewer"]
