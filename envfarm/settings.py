"""Everything envfarm takes from its process environment, read in this one place.

``Settings.from_env`` is the only reader of the ``ENVFARM_*`` variables (docs/settings.md lists
them). A command reads them once when it starts and fills the same fields from its flags
(``Settings.with_flags``): a flag never writes ``os.environ``, so what a run decided is a value
it passes on, to the episode plan (``controller/planning.py``) and the backend it assembles
(``controller/assembly.py``), and what it saved for ``--resume``. Code below the commands that
needs a setting of the host (a cache directory, the network pool) asks ``current()``, which
reads the environment as it is at that moment.

A bad value is refused with the error its domain has always raised (an image source order is
an ``ImageError``, the network pool a ``SandboxStartError``, the rest ``TaskSpecError``), naming
the variable and what it may be.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from envfarm.errors import ImageError, SandboxStartError, TaskSpecError

VerifierNetworkDefault = Literal["task-default", "none"]
VERIFIER_NETWORK_CHOICES: tuple[str, ...] = get_args(VerifierNetworkDefault)
ImageSource = Literal["local", "pull", "aliases"]
IMAGE_SOURCES: tuple[ImageSource, ...] = ("local", "pull", "aliases")
CleanRoom = Literal["restart", "fresh"]
SidecarNetwork = Literal["public", "none"]
Realism = Literal["workstation", "off"]
"""``workstation``: the sandbox looks like a developer's machine (docs/sandbox.md); ``off``."""
REALISM_CHOICES: tuple[str, ...] = get_args(Realism)
WORKSTATION_USER = "alex"
"""The developer the agent works as under the workstation profile."""
DEFAULT_NETWORK_POOL = "198.18.0.0/15"
DEFAULT_NETWORK_PREFIX = 27
DEFAULT_SANDBOX_NAMESPACE = "envfarm-sandboxes"
_TRUE = {"1", "true", "yes", "on"}

VERIFIER_NETWORK_ENV = "ENVFARM_VERIFIER_NETWORK"
OFFLINE_ENV = "ENVFARM_OFFLINE"
IMAGE_SOURCES_ENV = "ENVFARM_IMAGE_SOURCES"
CLEAN_ROOM_ENV = "ENVFARM_CLEAN_ROOM"
SIDECAR_NETWORK_ENV = "ENVFARM_SIDECAR_NETWORK"
REALISM_ENV = "ENVFARM_REALISM"
ALIASES_ENV = "ENVFARM_ALIASES"
NETWORK_POOL_ENV = "ENVFARM_NETWORK_POOL"
NETWORK_PREFIX_ENV = "ENVFARM_NETWORK_PREFIX"
PRISTINE_CACHE_ENV = "ENVFARM_PRISTINE_CACHE"
POD_ENVS = ("ENVFARM_POD_NAME", "ENVFARM_POD_UID", "ENVFARM_POD_NAMESPACE")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DockerChoice(_Frozen):
    """Sandboxes as containers of the local Docker engine."""

    kind: Literal["docker"] = "docker"


class KubernetesChoice(_Frozen):
    """Sandboxes as pods (``ENVFARM_SANDBOX_BACKEND=kubernetes``)."""

    kind: Literal["kubernetes"] = "kubernetes"
    namespace: str = DEFAULT_SANDBOX_NAMESPACE
    """``ENVFARM_SANDBOX_NAMESPACE``: where the environment pods run."""


BackendChoice = Annotated[DockerChoice | KubernetesChoice, Field(discriminator="kind")]


class OwnerPodFacts(_Frozen):
    """The pod this process runs in, as the downward API names it (``ENVFARM_POD_*``)."""

    name: str
    uid: str
    namespace: str


class Settings(_Frozen):
    """What a process runs with: the environment's values, then its flags'."""

    verifier_network: VerifierNetworkDefault = "task-default"
    """``ENVFARM_VERIFIER_NETWORK``, ``--verifier-network``: the verifier's network when its task
    sets none (``controller/planning.py``)."""
    sidecar_network: SidecarNetwork = "public"
    """``ENVFARM_SIDECAR_NETWORK``, ``--sidecar-network``: whether compose sidecars get outbound
    network access as under Harbor (``public``) or none (``none``); the agent's container is
    never given a network by it."""
    realism: Realism = "off"
    """``ENVFARM_REALISM``, ``--realism``: the sandboxes' default profile (``workstation``
    hides what tells a sandbox, docs/sandbox.md#the-workstation-profile)."""
    fork: Literal["auto", "off"] = "auto"
    """``--fork``: whether a group's sandboxes are copies of one warm environment where the
    engine can (``auto``) or each started cold (``off``); a job's ``fork`` wins."""
    runtime: str | None = None
    """``--runtime``: the default container runtime (Docker) or RuntimeClass (Kubernetes)."""
    allowed_runtimes: tuple[str, ...] = ()
    """``--allow-runtime`` on ``serve``: runtimes a job may ask for besides the default."""
    request_ratio: float = Field(default=0.5, gt=0, le=1)
    """``--request-ratio``: what an environment pod requests of its CPU, memory and disk
    limits (Kubernetes schedules by requests; a pod may use up to its limits)."""
    offline: bool = False
    """``ENVFARM_OFFLINE``, ``--offline``: pull no base image."""
    image_sources: tuple[ImageSource, ...] = IMAGE_SOURCES
    """``ENVFARM_IMAGE_SOURCES``: where base images come from, in order (docs/images.md)."""
    clean_room: CleanRoom = "restart"
    """``ENVFARM_CLEAN_ROOM``: ``restart`` lets a clean room be the agent's container
    restarted where that grades the same; ``fresh`` always starts a new one."""
    backend: BackendChoice = Field(default_factory=DockerChoice)
    """``ENVFARM_SANDBOX_BACKEND``: ``docker`` or ``kubernetes``."""
    image_registry: str = ""
    """``ENVFARM_IMAGE_REGISTRY``: the registry prefix pods pull envfarm's images from."""
    owner_pod: OwnerPodFacts | None = None
    alias_tables: tuple[Path, ...] = ()
    """``ENVFARM_ALIASES``: the user's own alias tables (``os.pathsep``-separated)."""
    cache_dir: Path | None = None
    """``ENVFARM_CACHE_DIR``: envfarm's cache (default ``$XDG_CACHE_HOME/envfarm``)."""
    data_dir: Path | None = None
    """``ENVFARM_DATA_DIR``: envfarm's data directory (``paths.py``)."""
    dataset_cache: Path | None = None
    """``ENVFARM_DATASET_CACHE``: where dataset records become task directories."""
    dataset_image: str | None = None
    """``ENVFARM_DATASET_IMAGE``: the image name pattern of a dataset's instances."""
    dataset_commands: Path | None = None
    """``ENVFARM_DATASET_COMMANDS``: a user's test-command table for datasets."""
    network_pool: ipaddress.IPv4Network = ipaddress.IPv4Network(DEFAULT_NETWORK_POOL)
    """``ENVFARM_NETWORK_POOL``: the block environment networks are carved from."""
    network_prefix: int = DEFAULT_NETWORK_PREFIX
    """``ENVFARM_NETWORK_PREFIX``: the prefix length of each environment network."""
    pristine_cache: bool = True
    """``ENVFARM_PRISTINE_CACHE=0`` turns off the cache of images' pristine listings."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings ``environ`` (default: this process's environment) gives."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for reader in _READERS:
            values.update(reader(env))
        return cls.model_validate(values)

    def with_flags(self, **flags: Any) -> Settings:
        """These settings with each flag that was given (not None) in its field."""
        given = {name: value for name, value in flags.items() if value is not None}
        return self.model_validate({**self.model_dump(), **given}) if given else self

    def sources(self) -> list[ImageSource]:
        """The image sources to try, in order (``pull`` left out when offline)."""
        return [s for s in self.image_sources if not (s == "pull" and self.offline)]


def current() -> Settings:
    """The settings of this process's environment as it is now."""
    return Settings.from_env()


def _text(env: Mapping[str, str], name: str) -> str:
    return env.get(name, "").strip()


def _bad(name: str, value: str, expected: str) -> None:
    raise TaskSpecError(name, f"expected {expected}, got {value!r}")


def _choices(env: Mapping[str, str]) -> dict[str, Any]:
    network = _text(env, VERIFIER_NETWORK_ENV).lower() or "task-default"
    if network not in VERIFIER_NETWORK_CHOICES:
        _bad(VERIFIER_NETWORK_ENV, network, f"one of {', '.join(VERIFIER_NETWORK_CHOICES)}")
    clean = _text(env, CLEAN_ROOM_ENV).lower() or "restart"
    if clean not in get_args(CleanRoom):
        _bad(CLEAN_ROOM_ENV, clean, "restart or fresh")
    sidecars = _text(env, SIDECAR_NETWORK_ENV).lower() or "public"
    if sidecars not in get_args(SidecarNetwork):
        _bad(SIDECAR_NETWORK_ENV, sidecars, "public or none")
    realism = _text(env, REALISM_ENV).lower() or "off"
    if realism not in REALISM_CHOICES:
        _bad(REALISM_ENV, realism, "workstation or off")
    return {
        "verifier_network": network,
        "sidecar_network": sidecars,
        "realism": realism,
        "clean_room": clean,
        "offline": _text(env, OFFLINE_ENV).lower() in _TRUE,
    }


def _image_sources(env: Mapping[str, str]) -> dict[str, Any]:
    text = _text(env, IMAGE_SOURCES_ENV)
    if not text:
        return {}
    names = [part.strip() for part in text.split(",") if part.strip()]
    if any(name not in IMAGE_SOURCES for name in names) or len(set(names)) != len(names):
        raise ImageError(
            f"{IMAGE_SOURCES_ENV}={text!r}: expected a comma-separated order of "
            f"{', '.join(IMAGE_SOURCES)}, each at most once"
        )
    return {"image_sources": tuple(names)}


def _backend(env: Mapping[str, str]) -> dict[str, Any]:
    kind = _text(env, "ENVFARM_SANDBOX_BACKEND") or "docker"
    namespace = _text(env, "ENVFARM_SANDBOX_NAMESPACE") or DEFAULT_SANDBOX_NAMESPACE
    if kind == "docker":
        backend: DockerChoice | KubernetesChoice = DockerChoice()
    elif kind == "kubernetes":
        backend = KubernetesChoice(namespace=namespace)
    else:
        raise TaskSpecError("ENVFARM_SANDBOX_BACKEND", f"expected docker or kubernetes: {kind!r}")
    pod = [_text(env, name) for name in POD_ENVS]
    owner = OwnerPodFacts(name=pod[0], uid=pod[1], namespace=pod[2]) if all(pod) else None
    return {
        "backend": backend,
        "owner_pod": owner,
        "image_registry": _text(env, "ENVFARM_IMAGE_REGISTRY"),
    }


def _network_pool(env: Mapping[str, str]) -> dict[str, Any]:
    text = env.get(NETWORK_POOL_ENV, DEFAULT_NETWORK_POOL)
    prefix_text = env.get(NETWORK_PREFIX_ENV, str(DEFAULT_NETWORK_PREFIX))
    try:
        pool = ipaddress.IPv4Network(text)
        prefix = int(prefix_text)
    except ValueError as exc:
        raise SandboxStartError(
            f"{NETWORK_POOL_ENV}={text!r} / {NETWORK_PREFIX_ENV}={prefix_text!r}: expected an "
            f"IPv4 network such as {DEFAULT_NETWORK_POOL} and a prefix length such as "
            f"{DEFAULT_NETWORK_PREFIX}: {exc}"
        ) from exc
    if not pool.prefixlen <= prefix <= 29:
        raise SandboxStartError(
            f"{NETWORK_PREFIX_ENV}={prefix} must lie between the pool's own prefix "
            f"({pool.prefixlen}) and 29 (a /29 holds 5 containers)"
        )
    return {"network_pool": pool, "network_prefix": prefix}


def _places(env: Mapping[str, str]) -> dict[str, Any]:
    def path(name: str) -> Path | None:
        text = env.get(name)
        return Path(text).expanduser() if text else None

    tables = tuple(Path(p) for p in env.get(ALIASES_ENV, "").split(os.pathsep) if p)
    return {
        "alias_tables": tables,
        "cache_dir": path("ENVFARM_CACHE_DIR"),
        "data_dir": path("ENVFARM_DATA_DIR"),
        "dataset_cache": path("ENVFARM_DATASET_CACHE"),
        "dataset_image": env.get("ENVFARM_DATASET_IMAGE") or None,
        "dataset_commands": path("ENVFARM_DATASET_COMMANDS"),
        "pristine_cache": env.get(PRISTINE_CACHE_ENV, "1") != "0",
    }


_READERS: tuple[Callable[[Mapping[str, str]], dict[str, Any]], ...] = (
    _choices,
    _image_sources,
    _backend,
    _network_pool,
    _places,
)
