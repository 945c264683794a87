"""Variables in a task's compose file: which there are, and how ``$VAR`` is interpolated.

Interpolation follows compose (``$$``, ``$VAR``, ``${VAR}``, ``${VAR:-default}``,
``${VAR-default}``, ``${VAR:?message}``, ``${VAR?message}``) with one deliberate difference: the
variables come from the task alone (``[environment].env`` and the few Harbor passes to its
compose files, see ``compose_variables``), never from the host's environment: an episode must
not depend on the shell envfarm was started from. An undefined variable without a default is
the empty string, as compose makes it when the shell does not set it (Harbor's Terminal-Bench
mapper writes ``TEST_DIR=${TEST_DIR}``), and is reported as a warning.
"""

from __future__ import annotations

import re
from typing import Any

MAIN_IMAGE_PLACEHOLDER = "envfarm-main-image"
"""What ``${MAIN_IMAGE_NAME}`` expands to: the main service's own image (environment/Dockerfile)."""

_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*)|(?P<bad>\{[^}]*\}?))"
)


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
