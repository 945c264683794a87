"""Read a task's compose file into a ``ComposeSpec``, collecting every problem as an ``Issue``.

Order: parse YAML, drop ``x-*`` keys, interpolate variables, check the top level, read each
service (``spec.compose_service``: its keys held against the subset, refusing what is outside it
with the reason, its shape validated, its paths resolved against ``environment/``, an image or a
build for every sidecar), then check the services against each other (dependencies exist and
form no cycle, ``service_healthy`` targets have a healthcheck) and, for a task, against its
``task.toml``. What is accepted without effect here (published ports, several networks, an
undefined variable read as empty) comes back as warnings, never as a refusal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from envfarm.spec.compose import (
    COMPOSE_FILE,
    MAIN_SERVICE,
    OTHER_COMPOSE_NAMES,
    ComposeService,
    ComposeSpec,
)
from envfarm.spec.compose_interpolation import (
    InterpolationError,
    compose_variables,
    interpolate_tree,
)
from envfarm.spec.compose_keys import TOP_LEVEL_KEYS
from envfarm.spec.compose_service import ServiceReader
from envfarm.spec.config import TaskConfig
from envfarm.spec.errors_fmt import FileIssues, Issue


@dataclass
class LoadedCompose:
    spec: ComposeSpec | None
    issues: list[Issue] = field(default_factory=list)
    warnings: list[Issue] = field(default_factory=list)


def find_compose_file(env_dir: Path) -> tuple[Path | None, list[Issue]]:
    """``environment/docker-compose.yaml`` (or None), and a warning for each other compose
    file name there: Harbor reads none of them, so they are task content."""
    others = [env_dir / name for name in OTHER_COMPOSE_NAMES if (env_dir / name).is_file()]
    warnings = [
        Issue(
            str(path),
            None,
            f"not the environment: only environment/{COMPOSE_FILE} is (as in Harbor), so this "
            "file is task content, left as it is",
        )
        for path in others
    ]
    path = env_dir / COMPOSE_FILE
    return (path if path.is_file() else None), warnings


def read_compose(path: Path, env_dir: Path, variables: dict[str, str]) -> LoadedCompose:
    where = str(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        return LoadedCompose(None, [Issue(where, None, f"invalid YAML{at}: {problem}")])
    except (OSError, UnicodeDecodeError) as exc:
        return LoadedCompose(None, [Issue(where, None, f"cannot read: {exc}")])
    if not isinstance(data, dict):
        return LoadedCompose(None, [Issue(where, None, "expected a mapping with a services: key")])
    try:
        json.dumps(data, ensure_ascii=False, default=str).encode("utf-8")
    except UnicodeEncodeError as exc:
        message = f"invalid text: an escape that is no character ({exc.reason})"
        return LoadedCompose(None, [Issue(where, None, message)])
    data = {k: v for k, v in data.items() if not str(k).startswith("x-")}
    undefined: set[str] = set()
    try:
        data = interpolate_tree(data, variables, undefined=undefined)
    except InterpolationError as exc:
        return LoadedCompose(None, [Issue(where, None, str(exc))])
    loader = _Loader(path, env_dir, variables)
    spec, issues = loader.load(data)
    warnings = [
        Issue(
            where,
            None,
            f"undefined variable ${{{name}}} is empty, as compose makes it; compose files see "
            "only [environment].env of task.toml and Harbor's variables, never the host's "
            "environment",
        )
        for name in sorted(undefined)
    ]
    return LoadedCompose(spec, issues, warnings + loader.notes.warnings)


class _Loader:
    def __init__(self, path: Path, env_dir: Path, variables: dict[str, str]) -> None:
        self.path, self.env_dir, self.variables = path, env_dir, variables
        self.notes = FileIssues(str(path))
        self.networks: dict[str, set[str]] = {}
        """Per service, the networks the file puts it on."""
        self.optional: dict[str, set[str]] = {}
        """Per service, the dependencies marked ``required: false``."""

    def load(self, data: dict[str, Any]) -> tuple[ComposeSpec | None, list[Issue]]:
        for key in data:
            if key not in TOP_LEVEL_KEYS:
                self.notes.problem(
                    str(key),
                    f"not supported at the top level; supported: {', '.join(TOP_LEVEL_KEYS)}, x-*",
                )
        internal = self._top_networks(data.get("networks"))
        volumes = self._volumes(data.get("volumes"))
        raw = data.get("services")
        if not isinstance(raw, dict) or not raw:
            self.notes.problem("services", "expected a mapping of one or more services")
            return None, self.notes.issues
        services: dict[str, ComposeService] = {}
        reader = ServiceReader(self.notes, self.env_dir, self.variables, volumes)
        for name, body in raw.items():
            read = reader.read(str(name), body)
            if read is not None:
                inside = read.networks <= internal
                services[read.service.name] = read.service.model_copy(
                    update={"internal_only": inside}
                )
                self.networks[read.service.name] = read.networks
                self.optional[read.service.name] = read.optional
        if any(str(name) not in services for name in raw):
            return None, self.notes.issues
        services.setdefault(MAIN_SERVICE, ComposeService(name=MAIN_SERVICE))
        self._check_graph(services)
        used = sorted({net for nets in self.networks.values() for net in nets})
        if len(used) > 1:
            self.notes.warn(
                "networks",
                f"services are kept on different networks ({', '.join(used)}); here every "
                "service joins the environment's one internal network, so each can reach all "
                "the others",
            )
        if self.notes.issues:
            return None, self.notes.issues
        return ComposeSpec(path=self.path, services=services, volumes=sorted(volumes)), []

    def _top_networks(self, raw: Any) -> set[str]:
        """The networks declared ``internal: true`` (no way out, as compose makes them)."""
        if raw is None:
            return set()
        if not isinstance(raw, dict):
            self.notes.problem("networks", "expected a mapping of network names")
            return set()
        internal = set()
        for name, options in raw.items():
            if not isinstance(options, dict):
                continue
            if options.get("external"):
                self.notes.warn(
                    f"networks.{name}",
                    "an external network is never joined: the environment has its own "
                    "internal network only",
                )
            flag = options.get("internal", False)
            if not isinstance(flag, bool):
                self.notes.problem(f"networks.{name}.internal", "expected true or false")
            elif flag:
                internal.add(str(name))
        return internal

    def _volumes(self, raw: Any) -> set[str]:
        if raw is None:
            return set()
        if not isinstance(raw, dict):
            self.notes.problem("volumes", "expected a mapping of volume names")
            return set()
        for name, options in raw.items():
            if options not in (None, {}):
                self.notes.problem(
                    f"volumes.{name}",
                    "volume options (driver, external, name, labels...) are not supported; "
                    "declare it empty: each episode gets its own volume, removed afterwards",
                )
        return {str(name) for name in raw}

    def _check_graph(self, services: dict[str, ComposeService]) -> None:
        for name, service in services.items():
            for dependency, condition in list(service.depends_on.items()):
                field = f"services.{name}.depends_on.{dependency}"
                target = services.get(dependency)
                if target is None:
                    if dependency in self.optional.get(name, set()):
                        del service.depends_on[dependency]
                        continue
                    self.notes.problem(field, f"no service named {dependency!r} in this file")
                elif dependency == name:
                    self.notes.problem(field, "a service cannot depend on itself")
                elif condition == "service_healthy" and target.health_argv() is None:
                    self.notes.problem(
                        field,
                        f"condition service_healthy needs a healthcheck on {dependency!r}; "
                        "declare one in this file",
                    )
        if not self.notes.issues:
            cycle = find_cycle({n: set(s.depends_on) for n, s in services.items()})
            if cycle:
                self.notes.problem("services", f"dependency cycle: {' -> '.join(cycle)}")


def compose_for_task(env_dir: Path, config: TaskConfig) -> LoadedCompose:
    """The task's compose file (spec None without one), checked against its ``task.toml``."""
    path, warnings = find_compose_file(env_dir)
    if path is None:
        return LoadedCompose(None, [], warnings)
    env = config.environment
    variables = compose_variables(
        env.env,
        cpus=env.cpus,
        memory_mb=env.memory_mb,
        docker_image=env.docker_image,
        context_dir=str(env_dir.resolve()),
    )
    loaded = read_compose(path, env_dir, variables)
    loaded.warnings[:0] = warnings
    spec, issues = loaded.spec, loaded.issues
    if spec is None:
        return loaded
    main, where = spec.main, f"services.{MAIN_SERVICE}"
    if env.docker_image is not None and (main.image or main.build_context):
        issues.append(
            Issue(
                str(path),
                where,
                "task.toml sets [environment].docker_image and the main service sets its own "
                "image or build; keep one",
            )
        )
    if env.healthcheck is not None and main.healthcheck is not None:
        issues.append(
            Issue(
                str(path),
                f"{where}.healthcheck",
                "task.toml has [environment.healthcheck] too; declare the main container's "
                "healthcheck in one place",
            )
        )
    if issues:
        loaded.spec = None
    return loaded


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
