"""Read a task's compose file into a ``ComposeSpec``, collecting every problem as an ``Issue``.

Order: parse YAML, drop ``x-*`` keys, interpolate variables, check the top level and each
service's keys (refusing what is outside the subset with the reason), validate each service's
shape, then resolve paths against ``environment/`` and check the services against each other
(dependencies exist and form no cycle, ``service_healthy`` targets have a healthcheck, every
sidecar has an image).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from envfarm.spec.compose import (
    COMPOSE_FILES,
    MAIN_REFUSED,
    MAIN_SERVICE,
    SERVICE_KEYS,
    TOP_LEVEL_KEYS,
    UNSUPPORTED_KEYS,
    ComposeService,
    ComposeSpec,
    RawService,
    ServiceBuild,
    service_issues,
)
from envfarm.spec.compose_fields import (
    MAIN_IMAGE_PLACEHOLDER,
    InterpolationError,
    compose_variables,
    find_cycle,
    interpolate_tree,
    parse_env_file,
    parse_volume,
    task_relative,
)
from envfarm.spec.config import TaskConfig
from envfarm.spec.errors_fmt import Issue

_SERVICE_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*")


def find_compose_file(env_dir: Path) -> tuple[Path | None, list[Issue]]:
    found = [env_dir / name for name in COMPOSE_FILES if (env_dir / name).is_file()]
    if len(found) > 1:
        names = ", ".join(path.name for path in found)
        return found[0], [Issue(str(found[1]), None, f"several compose files ({names}); keep one")]
    return (found[0] if found else None), []


def load_compose(
    path: Path, env_dir: Path, variables: dict[str, str]
) -> tuple[ComposeSpec | None, list[Issue]]:
    where = str(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        return None, [Issue(where, None, f"invalid YAML{at}: {problem}")]
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Issue(where, None, f"cannot read: {exc}")]
    if not isinstance(data, dict):
        return None, [Issue(where, None, "expected a mapping with a services: key")]
    data = {k: v for k, v in data.items() if not str(k).startswith("x-")}
    try:
        data = interpolate_tree(data, variables)
    except InterpolationError as exc:
        return None, [Issue(where, None, str(exc))]
    return _Loader(path, env_dir).load(data)


class _Loader:
    def __init__(self, path: Path, env_dir: Path) -> None:
        self.path, self.env_dir = path, env_dir
        self.issues: list[Issue] = []
        self.optional: dict[str, set[str]] = {}
        """Per service, the dependencies marked ``required: false``."""

    def problem(self, field: str | None, message: str) -> None:
        self.issues.append(Issue(str(self.path), field, message))

    def load(self, data: dict[str, Any]) -> tuple[ComposeSpec | None, list[Issue]]:
        for key in data:
            if key not in TOP_LEVEL_KEYS:
                self.problem(
                    str(key),
                    "not supported at the top level (every service joins the environment's own "
                    f"internal network); supported: {', '.join(TOP_LEVEL_KEYS)}, x-*",
                )
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
        if self.issues:
            return None, self.issues
        return ComposeSpec(path=self.path, services=services, volumes=sorted(volumes)), []

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
                context = task_relative(build.context, self.env_dir, "build context")
                dockerfile = task_relative(
                    str(Path(context) / build.dockerfile), self.env_dir, "Dockerfile"
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
            try:
                mounts.append(parse_volume(entry, self.env_dir, volumes))
            except ValueError as exc:
                self.problem(f"{field}.volumes[{index}]", str(exc))
        if raw.working_dir is not None and not raw.working_dir.startswith("/"):
            self.problem(f"{field}.working_dir", "must be an absolute path in the container")
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


def compose_for_task(env_dir: Path, config: TaskConfig) -> tuple[ComposeSpec | None, list[Issue]]:
    """The task's compose file (None without one), checked against its ``task.toml``."""
    path, issues = find_compose_file(env_dir)
    if path is None:
        return None, issues
    env = config.environment
    variables = compose_variables(
        env.env, cpus=env.cpus, memory_mb=env.memory_mb, docker_image=env.docker_image
    )
    spec, load_issues = load_compose(path, env_dir, variables)
    issues += load_issues
    if spec is None:
        return None, issues
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
    return (None if issues else spec), issues
