"""The docker-compose subset envfarm runs: a task's ``environment/docker-compose.yaml``.

Only that file is the environment, as in Harbor, which reads no other: a ``docker-compose.yml``
or ``compose.yaml`` elsewhere in ``environment/`` is task content (a project the agent works
on), reported with a warning and otherwise left alone.

The main container is the service named ``main`` (Harbor's convention; the service may be
omitted, and its image, when not given, comes from ``environment/Dockerfile`` or
``[environment].docker_image``). Its ``command``/``entrypoint`` are kept: Harbor's own idle
``["sh", "-c", "sleep infinity"]`` is simply the default, and any other command is the main
process (``Task.main_command``). Every other service is a sidecar on the episode's own internal
network, reachable by its name. Supported keys are listed in ``compose_keys.SERVICE_KEYS``. Keys
that cannot change what runs inside the environment are accepted as Harbor's compose accepts
them: ``container_name`` (containers keep envfarm's names, the given name becomes one more DNS
name of the service), ``ports`` (nothing is published on the host: a warning), ``networks``
(every service joins the environment's one network; network aliases are honoured; a warning when
the file keeps services on different networks; a sidecar whose networks are all ``internal:
true`` gets no outbound network, as under compose). What would (privileges, host networking,
devices, host paths...) is refused with a ``TaskSpecError`` naming the file, the service and the
key, because a silently ignored key would run a different environment than its author wrote.
``x-*`` extension keys are ignored.

Paths (build contexts, bind mounts) must stay inside ``environment/``: an episode sees the
task's own files and nothing else of the host.

This module holds the resolved form the rest of envfarm reads (``ComposeSpec``, its
``ComposeService`` values, their health checks and mounts). Elsewhere: the keys as written,
with what is refused and why (``spec.compose_keys``); the variables a file sees
(``spec.compose_interpolation``); its paths (``spec.compose_paths``); reading a file
(``spec.compose_load``) and one service of it (``spec.compose_service``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

COMPOSE_FILE = "docker-compose.yaml"
OTHER_COMPOSE_NAMES = ("docker-compose.yml", "compose.yaml", "compose.yml")
"""Names compose itself would read, but Harbor does not: task content, not the environment."""
MAIN_SERVICE = "main"
_SHELLS = ("sh", "/bin/sh", "bash", "/bin/bash", "/usr/bin/env sh", "/usr/bin/env bash")
_IDLE_SCRIPTS = ("sleep infinity", "tail -f /dev/null", "exec sleep infinity")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(us|ms|s|m|h)")
_DURATION_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def is_idle_command(command: list[str]) -> bool:
    """Harbor's ``sh -c "sleep infinity"`` and its usual spellings: keep the container up."""
    if command in (["sleep", "infinity"], ["tail", "-f", "/dev/null"]):
        return True
    return (
        len(command) == 3
        and command[0] in _SHELLS
        and command[1] == "-c"
        and command[2].strip() in _IDLE_SCRIPTS
    )


Condition = Literal["service_started", "service_healthy"]


def scalar_text(value: Any, what: str) -> str:
    """A YAML scalar as the text compose reads (``true`` for a boolean); ``what`` names it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    raise ValueError(f"{what}: expected a string or number, got {value!r}")


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


def _duration(value: Any) -> float:
    return parse_duration(value)


def _words(value: Any) -> Any:
    """YAML reads ``[CMD, true]`` as a boolean; compose means the word."""
    if isinstance(value, list):
        return [scalar_text(item, "test") if not isinstance(item, str) else item for item in value]
    return value


Duration = Annotated[float, BeforeValidator(_duration)]


class ComposeModel(BaseModel):
    """A mapping of the compose file: a key the model does not declare is refused."""

    model_config = ConfigDict(extra="forbid")


class ServiceHealthcheck(ComposeModel):
    """Compose ``healthcheck``. ``test`` is kept as compose writes it: ``["CMD", ...]``,
    ``["CMD-SHELL", "..."]`` or a string (run by ``/bin/sh -c``)."""

    test: Annotated[list[str] | str | None, BeforeValidator(_words)] = None
    interval: Duration = 30.0
    timeout: Duration = 30.0
    retries: Annotated[int, Field(ge=1)] = 3
    start_period: Duration = 0.0
    start_interval: Duration = 5.0
    disable: bool = False

    def argv(self) -> list[str] | None:
        """The command to run, or None when the check is disabled."""
        test = self.test
        if self.disable or test is None or test == ["NONE"]:
            return None
        if isinstance(test, str):
            return ["/bin/sh", "-c", test]
        if len(test) >= 2 and test[0] == "CMD":
            return test[1:]
        if len(test) == 2 and test[0] == "CMD-SHELL":
            return ["/bin/sh", "-c", test[1]]
        raise ValueError(
            f"test {test!r}: expected a string, [CMD, arg, ...], [CMD-SHELL, command] or [NONE]"
        )


class VolumeMount(BaseModel):
    """One mount of a service. ``bind``: a file or directory of the task's environment/
    (``source`` relative to it), copied into the container when it is created. ``volume``: a
    per-episode volume, named (``source``) or anonymous (``source`` None)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["bind", "volume"]
    source: str | None
    target: str
    read_only: bool = False


class ComposeService(ComposeModel):
    """A resolved service: paths checked and relative to ``environment/``."""

    name: str
    image: str | None = None
    build_context: str | None = None
    """Relative to environment/ (``"."`` for environment/ itself); None when ``image`` is used."""
    build_dockerfile: str | None = None
    """Relative to environment/."""
    build_args: dict[str, str] = Field(default_factory=dict)
    build_target: str | None = None
    environment: dict[str, str] = Field(default_factory=dict)
    command: list[str] | None = None
    entrypoint: list[str] | None = None
    healthcheck: ServiceHealthcheck | None = None
    depends_on: dict[str, Condition] = Field(default_factory=dict)
    volumes: list[VolumeMount] = Field(default_factory=list)
    working_dir: str | None = None
    user: str | None = None
    restart: Literal["no", "always", "on-failure", "unless-stopped"] = "no"
    labels: dict[str, str] = Field(default_factory=dict)
    tty: bool = False
    stdin_open: bool = False
    aliases: list[str] = Field(default_factory=list)
    """More DNS names of the service on the environment's network (``container_name``, network
    ``aliases``), besides its service name."""
    internal_only: bool = False
    """Every network the file puts the service on is declared ``internal: true``: a sidecar
    then gets no outbound network, as under Docker Compose (``main``'s is the task's)."""

    def health_argv(self) -> list[str] | None:
        return self.healthcheck.argv() if self.healthcheck is not None else None


class ComposeSpec(ComposeModel):
    path: Path
    """The compose file."""
    services: dict[str, ComposeService]
    """Every service, ``main`` included (an implicit one when the file has none)."""
    volumes: list[str] = Field(default_factory=list)
    """Named volumes of the top level; each episode gets its own."""

    @property
    def main(self) -> ComposeService:
        return self.services[MAIN_SERVICE]

    @property
    def sidecars(self) -> dict[str, ComposeService]:
        return {name: svc for name, svc in self.services.items() if name != MAIN_SERVICE}

    def start_order(self) -> list[str]:
        """Services in an order where every dependency comes first (checked acyclic)."""
        order: list[str] = []
        placed: set[str] = set()

        def place(name: str) -> None:
            if name not in placed:
                for dependency in sorted(self.services[name].depends_on):
                    place(dependency)
                placed.add(name)
                order.append(name)

        for name in sorted(self.services):
            place(name)
        return order
