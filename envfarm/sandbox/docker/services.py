"""Sidecar containers, per-episode volumes and the main container's configuration in a compose
environment (blocking docker calls).

A sidecar is hardened like the main container (every capability dropped but the few that the usual
service images need to set up their data directory and drop to their own user, no new privileges, an
init process, memory, CPU and pids limits) and joins the environment's internal network under its
service name. It also joins the environment's outbound network (``networks.py``: it leads outside,
never to another container), for outbound access as under Harbor, whose compose services get the
default network (a sidecar that installs its server from a package index at start needs it), unless
the job turns that off (``sidecar_network = "none"``) or the compose file does, as Docker Compose
would, by declaring every network the sidecar is on ``internal: true``: the agent's container keeps
its own network settings either way. Nothing is published, so a sidecar is reachable only from its
environment's containers; one with outbound access is a relay for the agent's container, which can
ask it to fetch what it likes (docs/security.md).

The task's files a service mounts (``./init.sql:/docker-entrypoint-initdb.d/init.sql``) are
copied into the container before it starts, never bind-mounted: each episode gets its own copy,
nothing of the host is mounted into a sandbox, and what a service writes never reaches the task
directory. A read-only mount becomes a copy without write permission bits.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker.errors

from envfarm.errors import SandboxError, SandboxGone, SandboxStartError
from envfarm.plan.models import EnvironmentSpec
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.gates import Hold
from envfarm.sandbox.docker.labels import LABEL_MANAGED, LABEL_OWNER, owner_label
from envfarm.sandbox.docker.limits import start_error
from envfarm.sandbox.docker.networks import network_options, remove_network
from envfarm.sandbox.docker.sandbox_config import DockerSandboxConfig
from envfarm.sandbox.files import add_as_root
from envfarm.sandbox.hardening import DEFAULT_CAPS, SIDECAR_CPUS, SIDECAR_MEMORY_MB, SIDECAR_PIDS
from envfarm.sandbox.health import windowed
from envfarm.spec.compose import MAIN_SERVICE, ComposeService, VolumeMount

LABEL_ENVIRONMENT = "io.envfarm.environment"
LABEL_SERVICE = "io.envfarm.service"
LOG_LINES = 20


def main_config(
    environment: EnvironmentSpec, base: DockerSandboxConfig, env_id: str
) -> DockerSandboxConfig:
    """The main container's configuration inside a compose environment."""
    if environment.compose is None:
        return base
    main = environment.compose.main
    names = volume_names(env_id, environment.compose.volumes, main)
    return base.model_copy(
        update={
            "env": {**main.environment, **environment.config.env},
            "workdir": environment.config.workdir or main.working_dir,
            "network_name": f"envfarm-{env_id}",
            "network_aliases": [MAIN_SERVICE, *main.aliases],
            "volumes": volume_binds(main.volumes, names),
        }
    )


def volume_names(env_id: str, named: list[str], service: ComposeService) -> dict[str, str]:
    """Compose volume name (or an anonymous mount's target) -> the episode's docker volume."""
    names = {name: f"envfarm-{env_id}-{name}" for name in named}
    anonymous = [m for m in service.volumes if m.kind == "volume" and m.source is None]
    for index, mount in enumerate(anonymous):
        names[mount.target] = f"envfarm-{env_id}-{service.name}-anon{index}"
    return names


def volume_binds(
    mounts: list[VolumeMount], names: dict[str, str], *, copied: bool = False
) -> list[str]:
    """``docker_volume:/target:ro|rw`` for the volume mounts (``names``: mount target of an
    anonymous volume, or compose volume name -> the episode's docker volume). ``copied``: the
    volumes are filled as copies of a frozen environment's (``fork.py``), so the engine must
    not fill them from the image first (``nocopy``)."""
    binds = []
    for mount in mounts:
        if mount.kind == "volume":
            volume = names[mount.source or mount.target]
            mode = ("ro" if mount.read_only else "rw") + (",nocopy" if copied else "")
            binds.append(f"{volume}:{mount.target}:{mode}")
    return binds


def files_archive(env_dir: Path, mounts: list[VolumeMount]) -> bytes | None:
    """A tar placing each bind mount's files at its target; None without bind mounts."""
    binds = [mount for mount in mounts if mount.kind == "bind"]
    if not binds:
        return None
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for mount in binds:
            assert mount.source is not None
            source = env_dir / mount.source
            paths = [source] if source.is_file() else [source, *sorted(source.rglob("*"))]
            for path in paths:
                relative = path.relative_to(source).as_posix()
                name = mount.target.strip("/") + ("" if relative == "." else f"/{relative}")
                add_as_root(archive, path, name, read_only=mount.read_only)
    return buffer.getvalue()


def put_files(container_id: str, archive: bytes) -> None:
    try:
        if not docker_client().api.put_archive(container_id, "/", archive):
            raise SandboxStartError("the engine refused the service's files")
    except docker.errors.APIError as exc:
        raise SandboxStartError(f"could not copy the task's files in: {exc}") from exc


def create_sidecar(
    service: ComposeService,
    *,
    image: str,
    container_name: str,
    network: str,
    volumes: dict[str, str],
    labels: dict[str, str],
    env_dir: Path,
    outbound: str | None = None,
    copied: bool = False,
    held: Hold | None = None,
) -> str:
    """Create (not start) the sidecar with its files in place; its id. ``outbound``: the
    environment's outbound network, which it joins too; ``copied``: its volumes are being
    filled as copies (``volume_binds``); ``held``: its entrypoint and command that hold it at
    a gate (``gates.py``)."""
    kwargs: dict[str, Any] = {"entrypoint": service.entrypoint, "command": service.command}
    binds = volume_binds(service.volumes, volumes, copied=copied)
    if held is not None:
        kwargs.update(entrypoint=held.entrypoint, command=held.command)
        binds.append(held.bind)
    if service.restart != "no":
        kwargs["restart_policy"] = {"Name": service.restart}
    try:
        container = docker_client().containers.create(
            image,
            name=container_name,
            hostname=service.name,
            environment=service.environment,
            working_dir=service.working_dir,
            user=service.user,
            init=True,
            tty=service.tty,
            stdin_open=service.stdin_open,
            volumes=binds,
            cap_drop=["ALL"],
            cap_add=list(DEFAULT_CAPS),
            security_opt=["no-new-privileges"],
            mem_limit=f"{SIDECAR_MEMORY_MB}m",
            memswap_limit=f"{SIDECAR_MEMORY_MB}m",
            nano_cpus=int(SIDECAR_CPUS * 1e9),
            pids_limit=SIDECAR_PIDS,
            labels={**service.labels, **labels},
            **network_options(False, network, [service.name, *service.aliases]),
            **kwargs,
        )
    except docker.errors.ImageNotFound as exc:
        missing = f"service {service.name!r}: image {image!r} does not exist"
        raise SandboxStartError(missing) from exc
    except docker.errors.APIError as exc:
        raise start_error(exc, f"service {service.name!r}: could not create: {exc}") from exc
    if outbound is not None:
        try:
            docker_client().api.connect_container_to_network(str(container.id), outbound)
        except docker.errors.APIError as exc:
            raise start_error(exc, f"service {service.name!r}: no outbound network: {exc}") from exc
    archive = files_archive(env_dir, service.volumes)
    if archive is not None:
        put_files(str(container.id), archive)
    return str(container.id)


def start_sidecar(container_id: str, name: str) -> None:
    try:
        docker_client().api.start(container_id)
    except docker.errors.APIError as exc:
        raise SandboxStartError(f"service {name!r}: could not start: {exc}") from exc


def probe(container_id: str, argv: list[str]) -> tuple[bool, str]:
    """Run a healthcheck command in the sidecar: (exit status 0, output)."""
    api = docker_client().api
    try:
        exec_id = api.exec_create(container_id, argv)["Id"]
        output = api.exec_start(exec_id)
        code = api.exec_inspect(exec_id).get("ExitCode")
    except docker.errors.NotFound as exc:
        return False, f"the container is gone: {exc}"
    except docker.errors.APIError as exc:
        return False, f"could not run the check: {exc.explanation or exc}"
    text = output.decode(errors="replace") if isinstance(output, bytes) else str(output)
    if code != 0:
        text = f"exit code {code}: {text}"
    return code == 0, text


def probe_windowed(container_id: str, argv: list[str]) -> tuple[bool, str] | None:
    """The check repeated in the sidecar for a window (``health.windowed``): (passed, the last
    run's output), or None when the container has no ``/bin/sh`` to repeat it."""
    passed, output = probe(container_id, windowed(argv))
    if not passed and "OCI runtime exec failed" in output and "/bin/sh" in output:
        return None
    return passed, output


def log_tail(container_id: str) -> str:
    """The container's last log lines ('' when it is gone)."""
    try:
        container = docker_client().containers.get(container_id)
    except docker.errors.NotFound:
        return ""
    return bytes(container.logs(tail=LOG_LINES)).decode(errors="replace").strip()


def stopped_reason(container_id: str) -> str | None:
    """None while the container runs; else its exit code, OOM status and last log lines.
    SandboxGone when the container vanished (someone removed it: not the task's doing)."""
    try:
        container = docker_client().containers.get(container_id)
    except docker.errors.NotFound as exc:
        raise SandboxGone(f"the service's container {container_id[:12]} vanished") from exc
    state = container.attrs.get("State", {})
    if state.get("Running") and not state.get("Restarting"):
        return None
    why = "killed by the OOM killer" if state.get("OOMKilled") else "exited"
    logs = container.logs(tail=LOG_LINES).decode(errors="replace").strip()
    return f"{why} with code {state.get('ExitCode')}; last log lines:\n{logs or '(no output)'}"


def remove_container(container_id: str) -> None:
    """Gone, or being removed by another call (the route helper's own removal thread)."""
    try:
        docker_client().api.remove_container(container_id, force=True, v=True)
    except docker.errors.NotFound:
        return
    except docker.errors.APIError as exc:
        if exc.status_code == 409 and "already in progress" in str(exc):
            return
        raise SandboxError(f"could not remove container {container_id[:12]}: {exc}") from exc


def create_volume(name: str, labels: dict[str, str]) -> None:
    try:
        docker_client().volumes.create(name=name, labels=labels)
    except docker.errors.APIError as exc:
        raise SandboxStartError(f"could not create volume {name}: {exc}") from exc


def remove_volume(name: str) -> None:
    try:
        docker_client().api.remove_volume(name, force=True)
    except docker.errors.NotFound:
        return
    except docker.errors.APIError as exc:
        raise SandboxError(f"could not remove volume {name}: {exc}") from exc


def sweep(env_id: str) -> None:
    """Remove everything labelled with the environment (sidecars, network, volumes), and the
    envfarm sandbox of this process still attached to its network; raise the first failure
    after trying everything."""
    api = docker_client().api
    labelled = {"label": [f"{LABEL_ENVIRONMENT}={env_id}"]}
    errors: list[SandboxError] = []

    def attempt(function: Callable[[str], None], argument: str) -> None:
        try:
            function(argument)
        except SandboxError as exc:
            errors.append(exc)

    try:
        for container in api.containers(all=True, filters=labelled):
            attempt(remove_container, container["Id"])
        for network in api.networks(filters=labelled):
            for container_id in api.inspect_network(network["Id"]).get("Containers") or {}:
                with contextlib.suppress(docker.errors.NotFound):
                    labels = api.inspect_container(container_id)["Config"].get("Labels") or {}
                    if labels.get(LABEL_OWNER) == owner_label() and LABEL_MANAGED in labels:
                        attempt(remove_container, container_id)
            attempt(remove_network, network["Id"])
        for volume in api.volumes(filters=labelled).get("Volumes") or []:
            attempt(remove_volume, volume["Name"])
    except docker.errors.APIError as exc:
        errors.append(SandboxError(f"could not list environment {env_id}'s resources: {exc}"))
    if errors:
        raise errors[0]
