"""The containers of an environment pod (pure functions): what the Docker backend runs, as
containers of one pod (``podspec`` puts them together).

* The **main container** runs the task image with the in-sandbox helper as its process (stdin
  open, no TTY): envfarm attaches to it and speaks the channel protocol, as with Docker. An
  init container copies the static helper into the ``envfarm-helper`` ``emptyDir``, mounted
  read-only at ``/.envfarm``. Environment variables, working directory, CPU and memory are the
  Docker backend's (``[environment]`` over the compose ``main`` service); ``storage_mb`` is
  the ``ephemeral-storage`` limit. The pod requests ``request_ratio`` of each limit (the plan's:
  0.5 unless the job or the server says otherwise), so it is scheduled with headroom: one
  published measurement saw requests equal to limits turn 5.8% of Terminal-Bench 2 trials
  into infrastructure errors, and 0.5% with headroom.
* Every other compose service is a **sidecar container** with its image, environment,
  command (compose ``entrypoint`` is Kubernetes ``command``, compose ``command`` is ``args``),
  working directory and the Docker backend's sidecar limits. A compose healthcheck becomes an
  exec ``readinessProbe`` (interval, timeout and retries carried over); the pod is Ready when
  every check passes, which is when the Docker backend lets the agent start.
* **Hardening** as with Docker: every capability dropped but ``DEFAULT_CAPS``, no privilege
  escalation, the runtime's default seccomp profile; ``run_as_user`` runs the main container
  as that non-root user with no capability at all, for tasks whose agent and verifier never
  need root (the helper cannot switch users then). A compose ``user:`` of a sidecar must be
  numeric (Kubernetes has no user names).
"""

from __future__ import annotations

import math
import shlex
from typing import Any

from envfarm.errors import TaskSpecError
from envfarm.plan.models import SandboxSpec
from envfarm.sandbox.hardening import DEFAULT_CAPS, SIDECAR_CPUS, SIDECAR_MEMORY_MB
from envfarm.sandbox.kubernetes.podfiles import (
    BINDS_DIR,
    BINDS_VOLUME,
    dns_label,
    files_archive,
    volume_mounts,
)
from envfarm.sandbox.kubernetes.podimages import PodImages
from envfarm.spec.compose import MAIN_SERVICE, ComposeService, ServiceHealthcheck

MAIN_CONTAINER = MAIN_SERVICE
"""The main container's name (``podspec`` offers it too, to whoever reads a pod)."""
HELPER_VOLUME = "envfarm-helper"
HELPER_DIR = "/.envfarm"
HELPER_PATH = f"{HELPER_DIR}/sandboxd"


def main_environment(spec: SandboxSpec) -> dict[str, str]:
    """The main container's variables, as the Docker backend sets them."""
    compose_env = (
        spec.environment.compose.main.environment if spec.environment.compose is not None else {}
    )
    return {**compose_env, **spec.environment.config.env}


def _env(values: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": key, "value": value} for key, value in values.items()]


def _quantity_cpu(cpus: float) -> str:
    return f"{max(round(cpus * 1000), 1)}m"


def _resources(cpus: float, memory_mb: int, ratio: float, storage_mb: int | None) -> dict[str, Any]:
    limits = {"cpu": _quantity_cpu(cpus), "memory": f"{memory_mb}Mi"}
    requests = {"cpu": _quantity_cpu(cpus * ratio), "memory": f"{max(1, int(memory_mb * ratio))}Mi"}
    if storage_mb is not None:
        limits["ephemeral-storage"] = f"{storage_mb}Mi"
        requests["ephemeral-storage"] = f"{max(1, int(storage_mb * ratio))}Mi"
    return {"limits": limits, "requests": requests}


def _hardened(run_as_user: int | None = None) -> dict[str, Any]:
    context: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": list(DEFAULT_CAPS)},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if run_as_user is not None and run_as_user != 0:
        context.update(runAsUser=run_as_user, runAsNonRoot=True)
        context["capabilities"] = {"drop": ["ALL"]}
    return context


def _probe(argv: list[str], interval: float, timeout: float, retries: int) -> dict[str, Any]:
    return {
        "exec": {"command": argv},
        "periodSeconds": max(math.ceil(interval), 1),
        "timeoutSeconds": max(math.ceil(timeout), 1),
        "failureThreshold": retries,
        "successThreshold": 1,
    }


def readiness_probe(check: ServiceHealthcheck | None) -> dict[str, Any] | None:
    """A compose healthcheck as an exec readiness probe (None: no check)."""
    argv = check.argv() if check is not None else None
    if check is None or argv is None:
        return None
    return _probe(argv, check.interval, check.timeout, check.retries)


def main_readiness_probe(spec: SandboxSpec) -> dict[str, Any] | None:
    """``[environment.healthcheck]`` (run by bash, else sh, as the helper runs commands), or
    the compose ``main`` service's healthcheck."""
    check = spec.environment.config.healthcheck
    if check is not None:
        quoted = shlex.quote(check.command)
        shell = (
            f"if [ -x /bin/bash ]; then exec /bin/bash -c {quoted}; fi; exec /bin/sh -c {quoted}"
        )
        argv = ["/bin/sh", "-c", shell]
        return _probe(argv, check.interval_sec, check.timeout_sec, check.retries)
    compose = spec.environment.compose
    return readiness_probe(compose.main.healthcheck) if compose is not None else None


def _sidecar_user(spec: SandboxSpec, service: ComposeService) -> dict[str, Any]:
    if service.user is None:
        return {}
    uid, _, gid = service.user.partition(":")
    if not uid.isdigit() or (gid and not gid.isdigit()):
        raise TaskSpecError(
            str(compose.path)
            if (compose := spec.environment.compose)
            else str(spec.environment.root),
            f"user {service.user!r}: Kubernetes runs containers by numeric id; write uid[:gid]",
            field=f"services.{service.name}.user",
        )
    ids: dict[str, Any] = {"runAsUser": int(uid), "runAsNonRoot": int(uid) != 0}
    return ids | ({"runAsGroup": int(gid)} if gid else {})


def sidecar_container(
    spec: SandboxSpec, service: ComposeService, image: str, pull: str
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": dns_label(service.name),
        "image": image,
        "imagePullPolicy": pull,
        "env": _env(service.environment),
        "resources": _resources(SIDECAR_CPUS, SIDECAR_MEMORY_MB, spec.request_ratio, None),
        "securityContext": _hardened() | _sidecar_user(spec, service),
        "volumeMounts": volume_mounts(spec.environment, service),
    }
    optional = {
        "command": service.entrypoint,
        "args": service.command,
        "workingDir": service.working_dir,
        "readinessProbe": readiness_probe(service.healthcheck),
    }
    container.update({key: value for key, value in optional.items() if value is not None})
    if service.tty or service.stdin_open:
        container.update(tty=service.tty, stdin=service.stdin_open)
    return container


def main_container(
    spec: SandboxSpec,
    images: PodImages,
    *,
    pull: str,
    request_ratio: float | None = None,
    run_as_user: int | None = None,
) -> dict[str, Any]:
    """The task image with the helper as its process; ``run_as_user``: that non-root user."""
    env = spec.environment.config
    compose = spec.environment.compose
    main = compose.main if compose is not None else None
    workdir = env.workdir or (main.working_dir if main is not None else None)
    mounts = [{"name": HELPER_VOLUME, "mountPath": HELPER_DIR, "readOnly": True}]
    if main is not None:
        mounts += volume_mounts(spec.environment, main)
    container: dict[str, Any] = {
        "name": MAIN_CONTAINER,
        "image": images.main,
        "imagePullPolicy": pull,
        "command": [HELPER_PATH],
        "args": [],
        "stdin": True,
        "stdinOnce": False,
        "tty": False,
        "env": _env(main_environment(spec)),
        "resources": _resources(
            env.cpus, env.memory_mb, request_ratio or spec.request_ratio, env.storage_mb
        ),
        "securityContext": _hardened(run_as_user),
        "volumeMounts": mounts,
    }
    if workdir:
        container["workingDir"] = workdir
    if (probe := main_readiness_probe(spec)) is not None:
        container["readinessProbe"] = probe
    return container


def init_containers(spec: SandboxSpec, images: PodImages, *, pull: str) -> list[dict[str, Any]]:
    """The helper copied into its volume, then the task's bind files unpacked (when any)."""
    small = _resources(0.1, 64, 1.0, None)
    copy_helper = {
        "name": "envfarm-helper",
        "image": images.helper,
        "imagePullPolicy": pull,
        "command": ["cp", images.helper_binary, HELPER_PATH],
        "resources": small,
        "securityContext": _hardened(),
        "volumeMounts": [{"name": HELPER_VOLUME, "mountPath": HELPER_DIR}],
    }
    archive = files_archive(spec.environment)
    if archive is None:
        return [copy_helper]
    unpack = {
        "name": "envfarm-files",
        "image": images.helper,
        "imagePullPolicy": pull,
        "command": [
            "/bin/sh",
            "-c",
            f'printf %s "$ENVFARM_FILES" | base64 -d | tar -xz -C {BINDS_DIR}',
        ],
        "env": [{"name": "ENVFARM_FILES", "value": archive}],
        "resources": small,
        "securityContext": _hardened(),
        "volumeMounts": [{"name": BINDS_VOLUME, "mountPath": BINDS_DIR}],
    }
    return [copy_helper, unpack]
