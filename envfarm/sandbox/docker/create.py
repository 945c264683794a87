"""One sandbox container's ``containers.create``: the hardened defaults of ``sandbox.py`` made
concrete (every capability dropped but the task's few, no-new-privileges, memory = memory+swap,
CPU and pids limits, a disk limit where the engine enforces one), envfarm's labels and the
helper as the main process and init (``--init`` without it), which removes the default route
of a container without network itself where it safely can (``helper_drops_route``). Created,
not run: ``containers.run`` would pull a missing image. The workstation profile changes a few
of them (``workstation.py``)."""

from __future__ import annotations

from typing import Any

from docker.models.containers import Container
from docker.types import LogConfig, Mount

from envfarm.sandbox.docker.client import docker_client, image_config
from envfarm.sandbox.docker.excess import GRADING_RESERVE_MB, VERIFIER_TMPFS, limits_and_helper
from envfarm.sandbox.docker.labels import (
    LABEL_KIND,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_RUN,
    LABEL_TASK,
    owner_label,
)
from envfarm.sandbox.docker.networks import network_options
from envfarm.sandbox.docker.sandbox_config import DockerSandboxConfig
from envfarm.sandbox.docker.sandboxd import HELPER_PATH
from envfarm.sandbox.docker.storage import storage_options
from envfarm.sandbox.docker.workstation import LOGS_RESERVE_MB, workstation_create


def create_container(
    cfg: DockerSandboxConfig, helper_mounts: list[Mount], *, gvisor: bool, drops_route: bool
) -> Container:
    """Blocking. On the default bridge when ``cfg.network``, else on ``none`` (with
    ``cfg.network_name``, on the environment's network alone)."""
    kwargs: dict[str, Any] = {}
    if cfg.runtime:
        kwargs["runtime"] = cfg.runtime
    if cfg.channel:
        kwargs.update(stdin_open=True, user="0:0", log_config=LogConfig(type="none"))
    kwargs["mounts"] = helper_mounts
    probe = {LABEL_MANAGED: "true", LABEL_KIND: "probe", LABEL_OWNER: owner_label()}
    workstation = cfg.realism == "workstation" and cfg.channel
    reserve = GRADING_RESERVE_MB if cfg.channel and cfg.storage_mb is not None else 0
    reserve += LOGS_RESERVE_MB if workstation and reserve else 0
    storage_mb = cfg.storage_mb + reserve if cfg.storage_mb is not None else None
    kwargs.update(storage_options(storage_mb, cfg.image, probe))
    limits = limits_and_helper(HELPER_PATH, cfg.memory_mb, cfg.pids_limit, gvisor=gvisor)
    helper = limits.helper
    if "storage_opt" in kwargs and cfg.channel:  # room for grading on a full disk
        kwargs["tmpfs"] = VERIFIER_TMPFS
        helper = [*helper, "--reserve-mb", str(reserve)]
    kwargs.update(hostname="sandbox", environment=cfg.env, cap_add=list(cfg.cap_add))
    if drops_route:  # ``helper_drops_route``
        helper = [*helper, "--drop-route"]
        kwargs["cap_add"].append("NET_ADMIN")
    if workstation:
        engine_execs = _image_healthcheck(cfg.image)
        helper, kwargs = workstation_create(kwargs, helper, cfg.env, cfg.cpus, engine_execs)
        kwargs["cap_add"] = list(dict.fromkeys(kwargs["cap_add"]))
    return docker_client().containers.create(
        cfg.image,
        command=helper if cfg.channel else ["sleep", "infinity"],
        entrypoint=[],
        init=not cfg.channel,  # the helper is the container's init (sweep.c)
        working_dir=cfg.workdir,
        volumes=cfg.volumes,
        **network_options(cfg.network, cfg.network_name, cfg.network_aliases),
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        mem_limit=f"{limits.memory_mb}m",
        memswap_limit=f"{limits.memory_mb}m",
        nano_cpus=int(cfg.cpus * 1e9),
        pids_limit=limits.pids,
        labels={
            LABEL_MANAGED: "true",
            LABEL_KIND: "sandbox",
            LABEL_RUN: cfg.run_id,
            LABEL_OWNER: owner_label(),
            LABEL_TASK: cfg.task_id,
        },
        **kwargs,
    )


def helper_drops_route(cfg: DockerSandboxConfig, *, gvisor: bool) -> bool:
    """Whether the helper removes the container's default route itself as it starts
    (``--drop-route``, ``images/sandboxd/route.c``) rather than a throwaway container after
    the start (``networks.drop_default_route``): for a container on its environment's network
    alone, under runc, whose image has no ``HEALTHCHECK`` (the engine would run it with the
    ``NET_ADMIN`` the container is given for this)."""
    if not cfg.channel or cfg.network_name is None or cfg.network or gvisor:
        return False
    return not _image_healthcheck(cfg.image)


def _image_healthcheck(image: str) -> bool:
    """Whether the image has a ``HEALTHCHECK`` of its own: the engine runs it by ``exec``, with
    the container's capabilities rather than the helper's."""
    test = (image_config(image).get("Healthcheck") or {}).get("Test") or []
    return bool(test) and test[0] != "NONE"
