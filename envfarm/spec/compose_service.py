"""One service of a compose file, from its keys as written to a ``ComposeService``.

Each key is held against the subset (``spec.compose_keys``): refused with its reason, or kept
and validated. Then the service is resolved against ``environment/``: its build context and
Dockerfile, its mounts (a mount of Harbor's own log directories is dropped: envfarm keeps those
logs itself), its env files (read here; the service's ``environment`` wins over them), its
health check and its host names (``container_name`` and network aliases). What has no effect
here is a warning, never a refusal: published ports, a ``deploy`` beyond Harbor's own limits,
network options. The file as a whole (its top level, how the services depend on each other) is
``spec.compose_load``'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from envfarm.spec.compose import MAIN_SERVICE, ComposeService
from envfarm.spec.compose_interpolation import HOST_LOGS_PLACEHOLDER, MAIN_IMAGE_PLACEHOLDER
from envfarm.spec.compose_keys import (
    MAIN_REFUSED,
    SERVICE_KEYS,
    UNSUPPORTED_KEYS,
    RawService,
    ServiceBuild,
    service_issues,
)
from envfarm.spec.compose_paths import parse_volume, task_relative
from envfarm.spec.errors_fmt import FileIssues

_SERVICE_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*")
_ENV_LINE = re.compile(r"(?:export\s+)?([A-Za-z_][A-Za-z0-9_.-]*)\s*=(.*)")


@dataclass(frozen=True)
class ReadService:
    service: ComposeService
    networks: set[str]
    """The networks the file puts it on (envfarm joins them all into one)."""
    optional: set[str]
    """Its dependencies marked ``required: false`` (dropped when the file lacks them)."""


class ServiceReader:
    """Reads the services of one compose file; problems and warnings go to ``notes``."""

    def __init__(
        self, notes: FileIssues, env_dir: Path, variables: dict[str, str], volumes: set[str]
    ) -> None:
        self.notes, self.env_dir, self.variables = notes, env_dir, variables
        self.volumes = volumes
        """The named volumes the file declares at its top level."""

    def read(self, name: str, body: Any) -> ReadService | None:
        """The service ``name`` of the file; None when it has a problem (noted)."""
        field = f"services.{name}"
        count = len(self.notes.issues)
        if not _SERVICE_NAME.fullmatch(name):
            self.notes.problem(field, "a service name is lower-case letters, digits, '_', '.', '-'")
        if not isinstance(body, dict):
            self.notes.problem(field, "expected a mapping of the service's keys")
            return None
        kept = {}
        for key, value in body.items():
            key = str(key)
            if key.startswith("x-"):
                continue
            if name == MAIN_SERVICE and key in MAIN_REFUSED:
                self.notes.problem(f"{field}.{key}", f"not supported on main: {MAIN_REFUSED[key]}")
            elif key in UNSUPPORTED_KEYS:
                self.notes.problem(f"{field}.{key}", f"not supported: {UNSUPPORTED_KEYS[key]}")
            elif key not in SERVICE_KEYS:
                self.notes.problem(
                    f"{field}.{key}",
                    f"not supported; supported keys of a service: {', '.join(SERVICE_KEYS)}",
                )
            else:
                kept[key] = value
        try:
            raw = RawService.model_validate(kept)
        except ValidationError as exc:
            self.notes.issues += service_issues(exc, str(self.notes.path), name)
            return None
        read = self._resolve(name, raw)
        return read if len(self.notes.issues) == count else None

    def _resolve(self, name: str, raw: RawService) -> ReadService:
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
                self.notes.problem(f"{field}.build", str(exc))
            else:
                if not (self.env_dir / context).is_dir():
                    self.notes.problem(
                        f"{field}.build", f"build context {context!r} is not a directory"
                    )
                resolved |= {
                    "build_context": context,
                    "build_dockerfile": dockerfile,
                    "build_args": build.args,
                    "build_target": build.target,
                }
            image = None  # with build:, image: only names the result; envfarm tags by hash
        elif image is None and name != MAIN_SERVICE:
            self.notes.problem(field, "a service needs image: or build:")
        if raw.healthcheck is not None:
            try:
                raw.healthcheck.argv()
            except ValueError as exc:
                self.notes.problem(f"{field}.healthcheck.test", str(exc))
            if raw.healthcheck.test is None and not raw.healthcheck.disable:
                self.notes.problem(f"{field}.healthcheck.test", "required (the command to run)")
        mounts = []
        for index, entry in enumerate(raw.volumes):
            if _harbor_log_mount(entry):
                continue
            try:
                mounts.append(parse_volume(entry, self.env_dir, self.volumes))
            except ValueError as exc:
                self.notes.problem(f"{field}.volumes[{index}]", str(exc))
        if raw.working_dir is not None and not raw.working_dir.startswith("/"):
            self.notes.problem(f"{field}.working_dir", "must be an absolute path in the container")
        if raw.ports:
            self.notes.warn(
                f"{field}.ports",
                "not published: a sandbox publishes nothing on the host; the other services "
                f"reach {name!r} by name on the ports it listens on",
            )
        if raw.deploy:
            self._deploy(field, name, raw.deploy)
        networks, aliases = self._networks(field, raw.networks)
        if raw.container_name is not None and raw.container_name != name:
            aliases.append(raw.container_name)
        for alias in aliases:
            if not _SERVICE_NAME.fullmatch(alias.lower()):
                self.notes.problem(f"{field}", f"{alias!r} is not usable as a host name")
        environment = {**self._env_files(field, raw.env_file), **raw.environment}
        depends = {dep: cond.condition for dep, cond in raw.depends_on.items()}
        optional = {dep for dep, cond in raw.depends_on.items() if not cond.required}
        service = ComposeService(
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
        return ReadService(service, networks, optional)

    def _networks(self, field: str, raw: list[str] | dict[str, Any]) -> tuple[set[str], list[str]]:
        """The networks the file puts the service on, and the aliases they give it."""
        networks = set(raw) if raw else {"default"}
        aliases: list[str] = []
        if isinstance(raw, dict):
            for network, options in raw.items():
                if options is None:
                    continue
                if not isinstance(options, dict):
                    self.notes.problem(
                        f"{field}.networks.{network}", "expected a mapping or nothing"
                    )
                    continue
                found = options.get("aliases", [])
                if not isinstance(found, list) or not all(isinstance(a, str) for a in found):
                    self.notes.problem(
                        f"{field}.networks.{network}.aliases", "expected a list of names"
                    )
                    continue
                aliases += found
                ignored = sorted(set(options) - {"aliases"})
                if ignored:
                    self.notes.warn(
                        f"{field}.networks.{network}",
                        f"{', '.join(ignored)} ignored: addresses on the environment's network "
                        "are the engine's",
                    )
        return networks, aliases

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
        self.notes.warn(f"{field}.deploy", f"ignored: this container's limits are {limits_from}")

    def _env_files(self, field: str, files: str | list[str]) -> dict[str, str]:
        values: dict[str, str] = {}
        for index, name in enumerate([files] if isinstance(files, str) else files):
            where = f"{field}.env_file[{index}]"
            try:
                relative = task_relative(name, self.env_dir, "env_file")
                text = (self.env_dir / relative).read_text(encoding="utf-8")
            except (ValueError, OSError, UnicodeDecodeError) as exc:
                self.notes.problem(where, str(exc))
                continue
            parsed, bad = parse_env_file(text)
            values.update(parsed)
            for number in bad:
                self.notes.problem(where, f"{name}, line {number}: expected KEY=value")
        return values


def _harbor_log_mount(entry: Any) -> bool:
    """A mount of Harbor's log directories (``${HOST_VERIFIER_LOGS_PATH}:...``)."""
    source = entry.get("source") if isinstance(entry, dict) else entry
    return isinstance(source, str) and source.startswith(HOST_LOGS_PLACEHOLDER)


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
