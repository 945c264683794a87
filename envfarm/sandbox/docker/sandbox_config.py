"""The Docker sandbox's configuration: one container's image, limits, network and helper."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from envfarm.sandbox.hardening import DEFAULT_CAPS
from envfarm.settings import Realism


class DockerSandboxConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    image: str
    network: bool = False
    """False: ``--network none``. True: the default bridge (the task asked for the network)."""
    verifier_network: bool | None = None
    """The task's verifier-phase network access, so a container whose network will change is
    created ready for it (grading decides when); None: the same as ``network``."""
    cpus: float = 1.0
    memory_mb: int = 2048
    storage_mb: int | None = None
    """Disk limit of the container's file system where the engine enforces one (``storage.py``);
    None: no limit."""
    pids_limit: int = 1024
    workdir: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    cap_add: list[str] = Field(default_factory=lambda: list(DEFAULT_CAPS))
    runtime: str | None = None
    network_name: str | None = None
    """Join this (environment) network, with ``network_aliases``; ``network`` True then adds the
    default bridge too. None: ``network`` alone decides (``--network none`` or the bridge)."""
    network_aliases: list[str] = Field(default_factory=list)
    sidecar_network: bool = True
    """The compose sidecars around this container also join the default bridge (outbound
    access, as Harbor's default network gives them); this container is not changed by it."""
    volumes: list[str] = Field(default_factory=list)
    """``volume:/path[:ro]`` mounts (per-episode volumes of a compose environment)."""
    run_id: str = "adhoc"
    task_id: str = ""
    output_cap: int = 4 * 1024 * 1024
    """Bytes kept per stream of one exec; the rest is dropped."""
    channel: bool = True
    """Run commands and file transfers through the in-sandbox helper (milliseconds per call).
    False: one ``docker exec`` per command and archives for files (tens of milliseconds)."""
    entrypoint: list[str] | None = None
    """The compose ``main`` service's ``entrypoint``; None: the image's ``ENTRYPOINT``."""
    clean_room_network: bool | None = None
    """The verifier grades in a fresh container with this network access: it is created (not
    started) as soon as this one has started, so the clean room only starts it. None: no clean
    room, or none created ahead."""
    restart_clean_room: bool = True
    """A clean room may be this container, swept or restarted (``DockerSandbox.end_processes``,
    ``restart_clean``, ``grading/cleanroom/inplace.py``); False: always a fresh container."""
    realism: Realism = "off"
    """``workstation``: the container looks like a developer's machine (``workstation.py``)."""
    command: list[str] | None = None
    """The compose ``main`` service's ``command``; None: Harbor's idle command. The image's
    entrypoint and this command run as a supervised process (``mainprocess.py``); channel
    path only."""
