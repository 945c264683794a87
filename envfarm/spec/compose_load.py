"""Read a task's compose file into a ``ComposeSpec``, collecting every problem as an ``Issue``.

Order: parse YAML, drop ``x-*`` keys, interpolate variables, check the top level and each
service's keys (refusing what is outside the subset with the reason), validate each service's
shape, then resolve paths against ``environment/`` and check the services against each other
(dependencies exist and form no cycle, ``service_healthy`` targets have a healthcheck, every
sidecar has an image). What is accepted without effect here (published ports, several
networks, an undefined variable read as empty) comes back as warnings, never as a refusal.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from envfarm.spec.compose import (
    COMPOSE_FILE,
    MAIN_SERVICE,
    OTHER_COMPOSE_NAMES,
    ComposeService,
    ComposeSpec,
)
from envfarm.spec.compose_interpolation import (
    HOST_LOGS_PLACEHOLDER,
    MAIN_IMAGE_PLACEHOLDER,
    InterpolationError,
    compose_variables,
    interpolate_tree,
)
from envfarm.spec.compose_keys import (
    MAIN_REFUSED,
    SERVICE_KEYS,
    TOP_LEVEL_KEYS,
    UNSUPPORTED_KEYS,
    RawService,
    ServiceBuild,
    service_issues,
)
from envfarm.spec.compose_paths import parse_volume, task_relative
from envfarm.spec.config import TaskConfig
from envfarm.spec.errors_fmt import Issue

_SERVICE_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*")
_ENV_LINE = re.compile(r"(?:export\s+)?([A-Za-z_][A-Za-z0-9_.-]*)\s*=(.*)")


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
    return LoadedCompose(spec, issues, warnings + loader.warnings)


class _Loader:
    def __init__(self, path: Path, env_dir: Path, variables: dict[str, str]) -> None:
        self.path, self.env_dir, self.variables = path, env_dir, variables
        self.issues: list[Issue] = []
        self.warnings: list[Issue] = []
        self.networks: dict[str, set[str]] = {}
        """Per service, the networks the file puts it on."""
        self.optional: dict[str, set[str]] = {}
        """Per service, the dependencies marked ``required: false``."""

    def problem(self, field: str | None, message: str) -> None:
        self.issues.append(Issue(str(self.path), field, message))

    def warn(self, field: str | None, message: str) -> None:
        self.warnings.append(Issue(str(self.path), field, message))

    def load(self, data: dict[str, Any]) -> tuple[ComposeSpec | None, list[Issue]]:
        for key in data:
            if key not in TOP_LEVEL_KEYS:
                self.problem(
                    str(key),
                    f"not supported at the top level; supported: {', '.join(TOP_LEVEL_KEYS)}, x-*",
                )
        self._top_networks(data.get("networks"))
        volumes = self._volumes(data.get("volumes"))
        raw = data.get("services")
        if not isinstance(raw, dict) or not raw:
            self.problem("services", "expected a mapping of one or more services")
            return None, self.issues
        services: dict[str, ComposeService] = {}
        for name, body in raw.items():
            service = self._service(str(name), body, volumes)
            if service is not None:
                services[service.name] = service
        if any(str(name) not in services for name in raw):
            return None, self.issues
        services.setdefault(MAIN_SERVICE, ComposeService(name=MAIN_SERVICE))
        self._check_graph(services)
        used = sorted({net for nets in self.networks.values() for net in nets})
        if len(used) > 1:
            self.warn(
                "networks",
                f"services are kept on different networks ({', '.join(used)}); here every "
                "service joins the environment's one internal network, so each can reach all "
                "the others",
            )
        if self.issues:
            return None, self.issues
        return ComposeSpec(path=self.path, services=services, volumes=sorted(volumes)), []

    def _top_networks(self, raw: Any) -> None:
        if raw is None:
            return
        if not isinstance(raw, dict):
            self.problem("networks", "expected a mapping of network names")
            return
        for name, options in raw.items():
            if isinstance(options, dict) and options.get("external"):
                self.warn(
                    f"networks.{name}",
                    "an external network is never joined: the environment has its own "
                    "internal network only",
                )

    def _service_networks(
        self, field: str, name: str, raw: list[str] | dict[str, Any]
    ) -> list[str]:
        """Record the service's networks; return the aliases they give it."""
        self.networks[name] = set(raw) if raw else {"default"}
        aliases: list[str] = []
        if isinstance(raw, dict):
            for network, options in raw.items():
                if options is None:
                    continue
                if not isinstance(options, dict):
                    self.problem(f"{field}.networks.{network}", "expected a mapping or nothing")
                    continue
                found = options.get("aliases", [])
                if not isinstance(found, list) or not all(isinstance(a, str) for a in found):
                    self.problem(f"{field}.networks.{network}.aliases", "expected a list of names")
                    continue
                aliases += found
                ignored = sorted(set(options) - {"aliases"})
                if ignored:
                    self.warn(
                        f"{field}.networks.{network}",
                        f"{', '.join(ignored)} ignored: addresses on the environment's network "
                        "are the engine's",
                    )
        return aliases

    def _deploy(self, field: str, name: str, deploy: dict[str, Any]) -> None:
        """Harbor's own ``resources.limits`` of ``${CPUS}``/``${MEMORY}`` on main are what
        task.toml says already; anything else is ignored, with a warning."""
        harbor = {"cpus": self.variables.get("CPUS"), "memory": self.variables.get("MEMORY")}
        resources = deploy.get("resources")
        limits = resources.get("limits") if isinstance(resources, dict) else None
        same = (
            name == MAIN_SERVICE
            and set(deploy) == {"resources"}
            and isinstance(resources, dict)
            and set(resources) == {"limits"}
            and isinstance(limits, dict)
            and all(str(v) == harbor.get(k) for k, v in limits.items())
        )
        if same:
            return
        limits_from = (
            "[environment].cpus and memory_mb of task.toml"
            if name == MAIN_SERVICE
            else "envfarm's fixed sidecar limits (docs/services.md)"
        )
        self.warn(f"{field}.deploy", f"ignored: this container's limits are {limits_from}")

    def _volumes(self, raw: Any) -> set[str]:
        if raw is None:
            return set()
        if not isinstance(raw, dict):
            self.problem("volumes", "expected a mapping of volume names")
            return set()
        for name, options in raw.items():
            if options not in (None, {}):
                self.problem(
                    f"volumes.{name}",
                    "volume options (driver, external, name, labels...) are not supported; "
                    "declare it empty: each episode gets its own volume, removed afterwards",
                )
        return {str(name) for name in raw}

    def _service(self, name: str, body: Any, volumes: set[str]) -> ComposeService | None:
        field = f"services.{name}"
        count = len(self.issues)
        if not _SERVICE_NAME.fullmatch(name):
            self.problem(field, "a service name is lower-case letters, digits, '_', '.', '-'")
        if not isinstance(body, dict):
            self.problem(field, "expected a mapping of the service's keys")
            return None
        kept = {}
        for key, value in body.items():
            key = str(key)
            if key.startswith("x-"):
                continue
            if name == MAIN_SERVICE and key in MAIN_REFUSED:
                self.problem(f"{field}.{key}", f"not supported on main: {MAIN_REFUSED[key]}")
            elif key in UNSUPPORTED_KEYS:
                self.problem(f"{field}.{key}", f"not supported: {UNSUPPORTED_KEYS[key]}")
            elif key not in SERVICE_KEYS:
                self.problem(
                    f"{field}.{key}",
                    f"not supported; supported keys of a service: {', '.join(SERVICE_KEYS)}",
                )
            else:
                kept[key] = value
        try:
            raw = RawService.model_validate(kept)
        except ValidationError as exc:
            self.issues += service_issues(exc, str(self.path), name)
            return None
        service = self._resolve(name, raw, volumes)
        return service if len(self.issues) == count else None

    def _resolve(self, name: str, raw: RawService, volumes: set[str]) -> ComposeService:
        field = f"services.{name}"
        resolved: dict[str, Any] = {}
        image = raw.image
        if name == MAIN_SERVICE and image == MAIN_IMAGE_PLACEHOLDER:
            image = None
        build = ServiceBuild(context=raw.build) if isinstance(raw.build, str) else raw.build
        if build is not None:
            try:
                context = task_relative(
                    build.context, self.env_dir, "build context", whole_task=True
                )
                dockerfile = task_relative(
                    str(Path(context) / build.dockerfile),
                    self.env_dir,
                    "Dockerfile",
                    whole_task=True,
                )
            except ValueError as exc:
                self.problem(f"{field}.build", str(exc))
            else:
                if not (self.env_dir / context).is_dir():
                    self.problem(f"{field}.build", f"build context {context!r} is not a directory")
                resolved |= {
                    "build_context": context,
                    "build_dockerfile": dockerfile,
                    "build_args": build.args,
                    "build_target": build.target,
                }
            image = None  # with build:, image: only names the result; envfarm tags by hash
        elif image is None and name != MAIN_SERVICE:
            self.problem(field, "a service needs image: or build:")
        if raw.healthcheck is not None:
            try:
                raw.healthcheck.argv()
            except ValueError as exc:
                self.problem(f"{field}.healthcheck.test", str(exc))
            if raw.healthcheck.test is None and not raw.healthcheck.disable:
                self.problem(f"{field}.healthcheck.test", "required (the command to run)")
        mounts = []
        for index, entry in enumerate(raw.volumes):
            if _harbor_log_mount(entry):
                continue
            try:
                mounts.append(parse_volume(entry, self.env_dir, volumes))
            except ValueError as exc:
                self.problem(f"{field}.volumes[{index}]", str(exc))
        if raw.working_dir is not None and not raw.working_dir.startswith("/"):
            self.problem(f"{field}.working_dir", "must be an absolute path in the container")
        if raw.ports:
            self.warn(
                f"{field}.ports",
                "not published: a sandbox publishes nothing on the host; the other services "
                f"reach {name!r} by name on the ports it listens on",
            )
        if raw.deploy:
            self._deploy(field, name, raw.deploy)
        aliases = self._service_networks(field, name, raw.networks)
        if raw.container_name is not None and raw.container_name != name:
            aliases.append(raw.container_name)
        for alias in aliases:
            if not _SERVICE_NAME.fullmatch(alias.lower()):
                self.problem(f"{field}", f"{alias!r} is not usable as a host name")
        environment = {**self._env_files(field, raw.env_file), **raw.environment}
        depends = {dep: cond.condition for dep, cond in raw.depends_on.items()}
        self.optional[name] = {dep for dep, cond in raw.depends_on.items() if not cond.required}
        return ComposeService(
            name=name,
            image=image,
            environment=environment,
            command=raw.command,
            entrypoint=raw.entrypoint,
            healthcheck=raw.healthcheck,
            depends_on=depends,
            volumes=mounts,
            working_dir=raw.working_dir,
            user=raw.user,
            restart=raw.restart,
            labels=raw.labels,
            tty=raw.tty,
            stdin_open=raw.stdin_open,
            aliases=list(dict.fromkeys(a for a in aliases if a != name)),
            **resolved,
        )

    def _env_files(self, field: str, files: str | list[str]) -> dict[str, str]:
        values: dict[str, str] = {}
        for index, name in enumerate([files] if isinstance(files, str) else files):
            where = f"{field}.env_file[{index}]"
            try:
                relative = task_relative(name, self.env_dir, "env_file")
                text = (self.env_dir / relative).read_text(encoding="utf-8")
            except (ValueError, OSError, UnicodeDecodeError) as exc:
                self.problem(where, str(exc))
                continue
            parsed, bad = parse_env_file(text)
            values.update(parsed)
            for number in bad:
                self.problem(where, f"{name}, line {number}: expected KEY=value")
        return values

    def _check_graph(self, services: dict[str, ComposeService]) -> None:
        for name, service in services.items():
            for dependency, condition in list(service.depends_on.items()):
                field = f"services.{name}.depends_on.{dependency}"
                target = services.get(dependency)
                if target is None:
                    if dependency in self.optional.get(name, set()):
                        del service.depends_on[dependency]
                        continue
                    self.problem(field, f"no service named {dependency!r} in this file")
                elif dependency == name:
                    self.problem(field, "a service cannot depend on itself")
                elif condition == "service_healthy" and target.health_argv() is None:
                    self.problem(
                        field,
                        f"condition service_healthy needs a healthcheck on {dependency!r}; "
                        "declare one in this file",
                    )
        if not self.issues:
            cycle = find_cycle({n: set(s.depends_on) for n, s in services.items()})
            if cycle:
                self.problem("services", f"dependency cycle: {' -> '.join(cycle)}")


def _harbor_log_mount(entry: Any) -> bool:
    """A mount of Harbor's log directories (``${HOST_VERIFIER_LOGS_PATH}:...``)."""
    source = entry.get("source") if isinstance(entry, dict) else entry
    return isinstance(source, str) and source.startswith(HOST_LOGS_PLACEHOLDER)


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
