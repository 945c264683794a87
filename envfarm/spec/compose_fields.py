"""Value-level rules of the compose subset: variable interpolation, durations, volume entries.

Interpolation follows compose (``$$``, ``$VAR``, ``${VAR}``, ``${VAR:-default}``,
``${VAR-default}``, ``${VAR:?message}``, ``${VAR?message}``) with one deliberate difference: the
variables come from the task alone (``[environment].env`` and the few Harbor passes to its
compose files, see ``compose_variables``), never from the host's environment: an episode must
not depend on the shell envfarm was started from. An undefined variable without a default is
the empty string, as compose makes it when the shell does not set it (Harbor's Terminal-Bench
mapper writes ``TEST_DIR=${TEST_DIR}``), and is reported as a warning.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

MAIN_IMAGE_PLACEHOLDER = "envfarm-main-image"
"""What ``${MAIN_IMAGE_NAME}`` expands to: the main service's own image (environment/Dockerfile)."""

_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*)|(?P<bad>\{[^}]*\}?))"
)
_ENV_LINE = re.compile(r"(?:export\s+)?([A-Za-z_][A-Za-z0-9_.-]*)\s*=(.*)")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(us|ms|s|m|h)")
_DURATION_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class InterpolationError(ValueError):
    pass


HOST_LOGS_PLACEHOLDER = "/envfarm-harbor-log-mount"
"""What Harbor's ``${HOST_*_LOGS_PATH}`` expand to: a mount of Harbor's own log directories,
which envfarm provides itself, so such a mount is dropped."""


def compose_variables(
    env: dict[str, str],
    *,
    cpus: float,
    memory_mb: int,
    docker_image: str | None,
    context_dir: str = ".",
) -> dict[str, str]:
    """The variables a task's compose file may use: Harbor's, then ``[environment].env``.
    ``context_dir``: what ``${CONTEXT_DIR}`` is (Harbor: the absolute environment/)."""
    variables = {
        "CONTEXT_DIR": context_dir,
        "MAIN_IMAGE_NAME": MAIN_IMAGE_PLACEHOLDER,
        "CPUS": f"{cpus:g}",
        "MEMORY": f"{memory_mb}M",
        "ENV_VERIFIER_LOGS_PATH": "/logs/verifier",
        "ENV_AGENT_LOGS_PATH": "/logs/agent",
        "ENV_ARTIFACTS_PATH": "/logs/artifacts",
        "HOST_VERIFIER_LOGS_PATH": f"{HOST_LOGS_PLACEHOLDER}/verifier",
        "HOST_AGENT_LOGS_PATH": f"{HOST_LOGS_PLACEHOLDER}/agent",
        "HOST_ARTIFACTS_PATH": f"{HOST_LOGS_PLACEHOLDER}/artifacts",
    }
    if docker_image:
        variables["PREBUILT_IMAGE_NAME"] = docker_image
    return {**variables, **env}


def interpolate(text: str, variables: dict[str, str], undefined: set[str] | None = None) -> str:
    """``undefined`` collects the variables read as empty; without it they are an error."""

    def replace(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        if match["bad"] is not None:
            raise InterpolationError(f"invalid variable reference ${match['bad']}")
        name = match["braced"] or match["bare"]
        op, arg = match["op"], match["arg"] or ""
        value = variables.get(name)
        unset = value is None or (op is not None and op.startswith(":") and value == "")
        if not unset:
            return str(value)
        if op in (":-", "-"):
            return arg
        if op in (":?", "?"):
            raise InterpolationError(f"${{{name}}}: {arg or 'is required'}")
        if undefined is not None:
            undefined.add(name)
            return ""
        raise InterpolationError(
            f"undefined variable ${{{name}}}: compose files see only [environment].env of "
            f"task.toml and {', '.join(sorted(k for k in variables if k.isupper()))}, never "
            f"the host's environment; give it a default (${{{name}:-value}}) or define it in "
            "[environment].env"
        )

    return _VARIABLE.sub(replace, text)


def interpolate_tree(
    value: Any, variables: dict[str, str], where: str = "", undefined: set[str] | None = None
) -> Any:
    """Interpolate every string value (not keys) of parsed YAML; errors name the dotted key."""
    if isinstance(value, str):
        try:
            return interpolate(value, variables, undefined)
        except InterpolationError as exc:
            raise InterpolationError(f"{where}: {exc}" if where else str(exc)) from None
    if isinstance(value, dict):
        return {
            key: interpolate_tree(
                item, variables, f"{where}.{key}" if where else str(key), undefined
            )
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [
            interpolate_tree(item, variables, f"{where}[{i}]", undefined)
            for i, item in enumerate(value)
        ]
    return value


def parse_duration(value: Any) -> float:
    """Compose durations: ``"5s"``, ``"1m30s"``, ``"500ms"``; plain numbers are refused."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            f"expected a duration such as '5s', '1m30s' or '500ms', got {value!r} "
            "(a bare number has no unit)"
        )
    text = value.strip()
    position, total = 0, 0.0
    for part in _DURATION_PART.finditer(text):
        if part.start() != position:
            break
        total += float(part.group(1)) * _DURATION_UNITS[part.group(2)]
        position = part.end()
    if position != len(text) or position == 0:
        raise ValueError(f"expected a duration such as '5s', '1m30s' or '500ms', got {value!r}")
    return total


class VolumeMount(BaseModel):
    """One mount of a service. ``bind``: a file or directory of the task's environment/
    (``source`` relative to it), copied into the container when it is created. ``volume``: a
    per-episode volume, named (``source``) or anonymous (``source`` None)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["bind", "volume"]
    source: str | None
    target: str
    read_only: bool = False


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


def parse_env_file(text: str) -> tuple[dict[str, str], list[int]]:
    """``KEY=value`` lines (``#`` comments, blank lines, ``export``, quotes); the numbers of the
    lines that are none of these."""
    values: dict[str, str] = {}
    bad: list[int] = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _ENV_LINE.fullmatch(stripped)
        if match is None:
            bad.append(number)
            continue
        value = match.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[match.group(1)] = value
    return values, bad


def find_cycle(edges: dict[str, set[str]]) -> list[str]:
    """A dependency cycle as ``[a, b, ..., a]``, or [] when there is none."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(name: str) -> list[str]:
        state[name] = 1
        stack.append(name)
        for dependency in sorted(edges.get(name, set())):
            if state.get(dependency) == 1:
                return [*stack[stack.index(dependency) :], dependency]
            if dependency not in state and (found := visit(dependency)):
                return found
        stack.pop()
        state[name] = 2
        return []

    for name in sorted(edges):
        if name not in state and (found := visit(name)):
            return found
    return []
