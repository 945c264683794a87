"""The paths a compose file names, kept inside the task: mounts, build contexts, env files.

An episode sees the task's own files and nothing else of the host, so every path is resolved
against ``environment/`` and refused when it leaves it (a build context may lie elsewhere in the
task's directory, as Harbor allows), points into a home directory or does not exist. A
``volumes:`` entry, short or long form, becomes a ``VolumeMount``: a bind mount of a task file,
copied into the container, or a per-episode volume, which must be declared at the top level
when it has a name.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from envfarm.spec.compose import VolumeMount

_MODES = {"ro", "rw", "z", "Z", "nocopy", "cached", "delegated", "consistent"}


def parse_volume(entry: Any, env_dir: Path, declared: set[str]) -> VolumeMount:
    """A ``volumes:`` entry (short ``SRC:DST[:MODE]`` / ``DST`` or long form) of a service."""
    if isinstance(entry, str):
        parts = entry.split(":")
        if len(parts) > 3 or not all(parts):
            raise ValueError(f"expected SOURCE:TARGET[:MODE] or TARGET, got {entry!r}")
        if len(parts) == 1:
            return _mount(None, parts[0], False, env_dir, declared)
        modes = set(parts[2].split(",")) if len(parts) == 3 else set()
        if not modes <= _MODES:
            raise ValueError(f"unknown mount mode(s) {', '.join(sorted(modes - _MODES))}")
        return _mount(parts[0], parts[1], "ro" in modes, env_dir, declared)
    if isinstance(entry, dict):
        unknown = set(entry) - {"type", "source", "target", "read_only"}
        if unknown:
            raise ValueError(
                f"unsupported key(s) {', '.join(sorted(unknown))} in a volume; supported: "
                "type (bind or volume), source, target, read_only"
            )
        kind = entry.get("type", "volume")
        if kind not in ("bind", "volume"):
            raise ValueError(f"volume type {kind!r} is not supported; use bind or volume")
        source, target = entry.get("source"), entry.get("target")
        if not isinstance(target, str) or (source is not None and not isinstance(source, str)):
            raise ValueError("a volume needs target (and source) written as strings")
        if kind == "bind" and source is None:
            raise ValueError("a bind mount needs a source inside environment/")
        if kind == "bind" and not source.startswith((".", "/")):  # type: ignore[union-attr]
            source = f"./{source}"
        read_only = entry.get("read_only", False)
        if not isinstance(read_only, bool):
            raise ValueError(f"read_only: expected true or false, got {read_only!r}")
        return _mount(source, target, read_only, env_dir, declared)
    raise ValueError(f"expected a string or a mapping, got {entry!r}")


def _mount(
    source: str | None, target: str, read_only: bool, env_dir: Path, declared: set[str]
) -> VolumeMount:
    if not target.startswith("/"):
        raise ValueError(f"the target {target!r} must be an absolute path in the container")
    if source is None:
        return VolumeMount(kind="volume", source=None, target=target, read_only=read_only)
    if source.startswith(("/", ".", "~")):
        relative = task_relative(source, env_dir, "bind mount source")
        return VolumeMount(kind="bind", source=relative, target=target, read_only=read_only)
    if source not in declared:
        raise ValueError(
            f"named volume {source!r} is not declared under the top-level volumes:; declare it "
            "there (each episode gets its own, removed afterwards)"
        )
    return VolumeMount(kind="volume", source=source, target=target, read_only=read_only)


def task_relative(path: str, env_dir: Path, what: str, *, whole_task: bool = False) -> str:
    """``path`` (relative to environment/, or absolute inside it) as a relative posix path.
    ``whole_task``: it may also lie elsewhere in the task's directory (a build context, as
    Harbor allows), and comes back as ``..``-relative then."""
    if path.startswith("~"):
        raise ValueError(
            f"{what} {path!r} points into a home directory on the host; only files "
            "of the task's environment/ can be mounted"
        )
    root = env_dir.resolve()
    limit = root.parent if whole_task else root
    resolved = (root / path).resolve()
    if not resolved.is_relative_to(limit):
        place = "directory" if whole_task else "environment/ directory"
        raise ValueError(
            f"{what} {path!r} lies outside the task's {place}; envfarm mounts "
            "nothing of the host but the task's own files"
        )
    if not resolved.exists():
        raise ValueError(f"{what} {path!r} does not exist in environment/")
    if not resolved.is_relative_to(root):
        return Path(os.path.relpath(resolved, root)).as_posix()
    return resolved.relative_to(root).as_posix() or "."
