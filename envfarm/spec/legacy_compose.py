"""The client service of a legacy Terminal-Bench ``docker-compose.yaml``, as envfarm reads it.

Terminal-Bench tasks describe their container as a compose service named ``client`` (built from
the task root, ``build: .``) with ``T_BENCH_*`` variables for names and log paths. Only what
decides the environment is read: the build, environment variables, the network mode and the
working directory; the image and container names, the command and the log mounts are envfarm's
business. Anything else (other services, other mounts, build arguments) is refused with an
error saying so, never dropped.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from envfarm.spec.config_values import NOT_YET
from envfarm.spec.errors_fmt import Issue

COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml")
CONTAINER_TEST_DIR = "/tests"
_VAR = re.compile(r"\$(?:\{(\w+)(?::?-([^}]*))?\}|(\w+))")
_CONTAINER_VARS = {
    "T_BENCH_TEST_DIR": CONTAINER_TEST_DIR,
    "T_BENCH_CONTAINER_LOGS_PATH": "/logs",
    "T_BENCH_CONTAINER_AGENT_LOGS_PATH": "/logs/agent",
}
_HOST_LOG_VARS = ("T_BENCH_TASK_LOGS_PATH", "T_BENCH_TASK_AGENT_LOGS_PATH")
_IGNORED_SERVICE_KEYS = frozenset(
    {"image", "container_name", "command", "init", "tty", "stdin_open", "build"}
)
_SERVICE_KEYS = _IGNORED_SERVICE_KEYS | {"environment", "volumes", "network_mode", "working_dir"}


class LegacyEnvironment(BaseModel):
    """Where the image comes from and how its container is set up."""

    model_config = ConfigDict(extra="forbid")
    dockerfile: Path | None = None
    context: Path
    docker_image: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    network: bool = True
    workdir: str | None = None


def read_yaml(path: Path, issues: list[Issue]) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        issues.append(Issue(str(path), None, f"invalid YAML{where}: {problem}"))
    except UnicodeDecodeError:
        issues.append(Issue(str(path), None, "not UTF-8 text"))
    except OSError as exc:
        issues.append(Issue(str(path), None, f"cannot read: {exc.strerror or exc}"))
    return None


def legacy_environment(root: Path, issues: list[Issue]) -> LegacyEnvironment | None:
    """The environment of the legacy task at ``root``; None (with issues) when unusable."""
    compose = next((root / n for n in COMPOSE_FILES if (root / n).is_file()), None)
    if compose is None:
        if (root / "Dockerfile").is_file():
            return LegacyEnvironment(
                dockerfile=root.resolve() / "Dockerfile", context=root.resolve()
            )
        issues.append(
            Issue(str(root / "Dockerfile"), None, "missing: the task image is built from it")
        )
        return None
    data = read_yaml(compose, issues)
    if data is None:
        return None
    return _client_service(root, compose, data, issues)


def _client_service(
    root: Path, compose: Path, data: Any, issues: list[Issue]
) -> LegacyEnvironment | None:
    where = str(compose)
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict) or not services:
        issues.append(Issue(where, "services", "expected a mapping with a `client` service"))
        return None
    name = "client" if "client" in services else next(iter(services))
    others = sorted(set(services) - {name})
    if others:
        issues.append(
            Issue(
                where,
                "services",
                f"service containers besides the client ({', '.join(others)}) are {NOT_YET} "
                "for legacy tasks: convert the task to the Harbor format (task.toml, "
                "environment/docker-compose.yaml)",
            )
        )
    for key in sorted(set(data) - {"services", "version", "name"}):
        if not key.startswith("x-") and data[key]:
            issues.append(Issue(where, key, f"top-level `{key}` is {NOT_YET} for legacy tasks"))
    service = services[name]
    if not isinstance(service, dict):
        issues.append(Issue(where, f"services.{name}", "expected a mapping"))
        return None
    field = f"services.{name}"
    for key in sorted(set(service) - _SERVICE_KEYS):
        issues.append(
            Issue(
                where,
                f"{field}.{key}",
                f"{NOT_YET} for legacy tasks; understood keys: {', '.join(sorted(_SERVICE_KEYS))}",
            )
        )
    env = _build(root, where, field, service, issues)
    if env is None:
        return None
    env.env = _service_env(where, field, service.get("environment"), issues)
    _volumes(where, field, service.get("volumes"), issues)
    mode = service.get("network_mode")
    if mode in ("none",):
        env.network = False
    elif mode not in (None, "bridge", "default"):
        issues.append(
            Issue(where, f"{field}.network_mode", f"allowed values: none, bridge; got {mode!r}")
        )
    workdir = service.get("working_dir")
    if workdir is not None:
        if not isinstance(workdir, str) or not workdir.startswith("/"):
            issues.append(Issue(where, f"{field}.working_dir", "expected an absolute path"))
        else:
            env.workdir = workdir
    return env


def _build(
    root: Path, where: str, field: str, service: dict[str, Any], issues: list[Issue]
) -> LegacyEnvironment | None:
    build = service.get("build")
    if build is None:
        image = service.get("image")
        if not isinstance(image, str) or not image or "T_BENCH_" in image:
            issues.append(
                Issue(where, f"{field}.build", "expected `build: .` or a prebuilt `image`")
            )
            return None
        return LegacyEnvironment(context=root.resolve(), docker_image=image)
    if isinstance(build, str):
        build = {"context": build}
    if not isinstance(build, dict) or set(build) - {"context", "dockerfile"}:
        issues.append(
            Issue(
                where,
                f"{field}.build",
                "expected a context path or {context, dockerfile}; build args and other "
                f"build options are {NOT_YET}",
            )
        )
        return None
    context = (root / str(build.get("context", "."))).resolve()
    dockerfile = (context / str(build.get("dockerfile", "Dockerfile"))).resolve()
    if not context.is_relative_to(root.resolve()) or not context.is_dir():
        issues.append(Issue(where, f"{field}.build.context", "must be a directory inside the task"))
        return None
    if not dockerfile.is_file():
        issues.append(Issue(str(dockerfile), None, "missing: the compose file builds it"))
        return None
    return LegacyEnvironment(dockerfile=dockerfile, context=context)


def _substitute(text: str, where: str, field: str, issues: list[Issue]) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        if name in _CONTAINER_VARS:
            return _CONTAINER_VARS[name]
        if match.group(2) is not None:
            return match.group(2)
        issues.append(Issue(where, field, f"unknown variable ${{{name}}}"))
        return ""

    return _VAR.sub(value, text)


def _service_env(where: str, field: str, raw: Any, issues: list[Issue]) -> dict[str, str]:
    pairs: list[tuple[str, Any]] = []
    if isinstance(raw, dict):
        pairs = list(raw.items())
    elif isinstance(raw, list):
        for item in raw:
            key, sep, val = str(item).partition("=")
            if not sep:
                issues.append(
                    Issue(where, f"{field}.environment", f"expected KEY=VALUE, got {item!r}")
                )
            pairs.append((key, val))
    elif raw is not None:
        issues.append(Issue(where, f"{field}.environment", "expected a mapping or a list"))
    return {
        str(key): _substitute(str(val), where, f"{field}.environment.{key}", issues)
        for key, val in pairs
        if val is not None
    }


def _volumes(where: str, field: str, raw: Any, issues: list[Issue]) -> None:
    for item in raw if isinstance(raw, list) else []:
        text = str(item)
        if not any(var in text for var in _HOST_LOG_VARS):
            issues.append(
                Issue(
                    where,
                    f"{field}.volumes",
                    f"volume {text!r}: mounts are {NOT_YET} for legacy tasks (only the "
                    "T_BENCH log mounts are understood, and envfarm collects logs itself)",
                )
            )
