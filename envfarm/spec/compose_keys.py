"""The keys of a compose file as written: what each may hold, and what is refused and why.

``RawService`` is a service after interpolation and before its paths are resolved: the keys of
the subset (``SERVICE_KEYS``) with compose's short forms read as compose reads them (a command
string split like a shell would, ``- KEY=value`` lists, a list of dependencies). A key outside
the subset is refused with the reason (``UNSUPPORTED_KEYS``, ``MAIN_REFUSED`` for the main
service), never dropped: it would run a different environment than its author wrote.
"""

from __future__ import annotations

import shlex
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationError

from envfarm.spec.compose import ComposeModel, Condition, ServiceHealthcheck, scalar_text
from envfarm.spec.errors_fmt import Issue, issues_from_validation, model_at


def _argv(value: Any) -> Any:
    """Compose splits a string command like a shell would (without running one)."""
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot split {value!r} into arguments: {exc}") from None
    return value


def _env_map(value: Any) -> Any:
    """``KEY: value`` or ``- KEY=value``; a key without a value would read the host's
    environment in compose, which envfarm never does."""
    if isinstance(value, list):
        pairs = {}
        for item in value:
            if not isinstance(item, str) or "=" not in item:
                raise ValueError(
                    f"{item!r} has no value; write KEY=value (envfarm never passes the "
                    "host's environment into a container)"
                )
            key, _, text = item.partition("=")
            pairs[key] = text
        return pairs
    if isinstance(value, dict):
        missing = [key for key, item in value.items() if item is None]
        if missing:
            raise ValueError(
                f"{', '.join(map(str, missing))} has no value; give one (envfarm never passes "
                "the host's environment into a container)"
            )
        return {str(key): scalar_text(item, str(key)) for key, item in value.items()}
    return value


Argv = Annotated[list[str], BeforeValidator(_argv)]
EnvMap = Annotated[dict[str, str], BeforeValidator(_env_map)]


class ServiceBuild(ComposeModel):
    context: str = "."
    dockerfile: str = "Dockerfile"
    args: EnvMap = Field(default_factory=dict)
    target: str | None = None
    """The stage of a multi-stage Dockerfile to build (``docker build --target``)."""


def _refuse_completed(value: Any) -> Any:
    if value == "service_completed_successfully":
        raise ValueError(
            "condition service_completed_successfully (one-shot jobs) is not supported; use "
            "service_started or service_healthy, and run one-shot setup in the Dockerfile"
        )
    return value


class DependsOn(ComposeModel):
    condition: Annotated[Condition, BeforeValidator(_refuse_completed)] = "service_started"
    required: bool = True
    """False: the dependency may be missing from the file (then it is ignored)."""
    restart: bool = False
    """Accepted and ignored: services are never restarted during an episode."""


def _depends_map(value: Any) -> Any:
    if isinstance(value, list):
        return {str(name): {} for name in value}
    return value


class RawService(ComposeModel):
    """A service as written in the file (after interpolation), before paths are resolved."""

    image: Annotated[str, Field(min_length=1)] | None = None
    build: str | ServiceBuild | None = None
    environment: EnvMap = Field(default_factory=dict)
    env_file: str | list[str] = Field(default_factory=list)
    command: Argv | None = None
    entrypoint: Argv | None = None
    healthcheck: ServiceHealthcheck | None = None
    depends_on: Annotated[dict[str, DependsOn], BeforeValidator(_depends_map)] = Field(
        default_factory=dict
    )
    volumes: list[Any] = Field(default_factory=list)
    working_dir: str | None = None
    user: Annotated[str, BeforeValidator(lambda v: str(v) if isinstance(v, int) else v)] | None = (
        None
    )
    expose: list[int | str] = Field(default_factory=list)
    restart: Literal["no", "always", "on-failure", "unless-stopped"] = "no"
    labels: EnvMap = Field(default_factory=dict)
    init: bool | None = None
    tty: bool = False
    stdin_open: bool = False
    pull_policy: str | None = None
    """Accepted and ignored: nothing is ever pulled."""
    deploy: dict[str, Any] | None = None
    """Accepted: Harbor passes the task's limits as ``resources.limits``; anything else in it
    is ignored with a warning (limits come from task.toml, sidecars get envfarm's)."""
    container_name: Annotated[str, Field(min_length=1)] | None = None
    """Accepted: one more DNS name of the service; the container keeps envfarm's name."""
    ports: list[Any] = Field(default_factory=list)
    """Accepted with a warning: nothing is published on the host."""
    networks: list[str] | dict[str, Any] = Field(default_factory=list)
    """Accepted: every service joins the environment's one network; aliases are honoured."""


SERVICE_KEYS = tuple(RawService.model_fields)
MAIN_REFUSED = {
    "user": "set [agent].user and [verifier].user in task.toml instead",
    "restart": "envfarm manages the main container's lifecycle; remove it",
}
UNSUPPORTED_KEYS = {
    "privileged": "services run unprivileged",
    "cap_add": "services get the fixed capability set documented in docs/services.md",
    "cap_drop": "services get the fixed capability set documented in docs/services.md",
    "security_opt": "services run with envfarm's security options",
    "network_mode": "every service joins the environment's own internal network",
    "devices": "host devices are never passed to a sandbox",
    "pid": "host namespaces are never shared with a sandbox",
    "ipc": "host namespaces are never shared with a sandbox",
    "userns_mode": "host namespaces are never shared with a sandbox",
    "uts": "host namespaces are never shared with a sandbox",
    "cgroup": "host namespaces are never shared with a sandbox",
    "sysctls": "kernel parameters cannot be changed by a task",
    "hostname": "a service's host name is its service name",
    "extra_hosts": "services resolve each other by service name only",
    "dns": "services use the environment network's own resolver",
    "links": "every service is reachable by its name without links",
    "external_links": "containers outside the environment are never reachable",
    "volumes_from": "share data through a named volume declared at the top level",
    "secrets": "use environment variables or files of the task",
    "configs": "use files of the task mounted from environment/",
    "runtime": "the runtime is chosen by envfarm",
    "extends": "write each service out in full",
}
TOP_LEVEL_KEYS = ("services", "volumes", "networks", "version", "name")


def service_issues(exc: ValidationError, path: str, service: str) -> list[Issue]:
    """Pydantic errors of one service as Issues; an unknown nested key lists what is allowed."""
    issues = []
    for issue, error in zip(
        issues_from_validation(exc, path, RawService, ("services", service)),
        exc.errors(include_url=False),
        strict=True,
    ):
        message = issue.message
        if error["type"] == "extra_forbidden":
            model = model_at(RawService, error["loc"][:-1])
            allowed = ", ".join(model.model_fields) if model is not None else "none"
            message = f"not supported; supported keys here: {allowed}"
        issues.append(Issue(issue.path, issue.field, message))
    return issues
