"""Pulling a base image through the engine, with the user's registry credentials.

The engine does the pull (its registry mirrors, proxies and ``/etc/docker/certs.d`` apply);
credentials come from the user's Docker config (``$DOCKER_CONFIG/config.json``, default
``~/.docker/config.json``, credential helpers included), which the SDK reads for the registry
of the reference. The config is read anew for every pull, so a login made while envfarm runs
counts.

A registry that does not answer (no route, no name resolution, a connection refused, nothing
received for ``STALL_S``) is remembered for the rest of the process: the next image from it
goes straight to the offline substitutes instead of waiting again. A registry that answers
that the image does not exist, or refuses the credentials, is not remembered: the next image
may be there. (Nor is a connection reset: for a registry the engine treats as insecure, such as
loopback's, that is what its plain-HTTP retry of a TLS port says after a refusal.)
"""

from __future__ import annotations

import threading

import docker
import docker.errors
import requests
from pydantic import BaseModel, ConfigDict

from envfarm.sandbox.images.aliases import registry_of

STALL_S = 15.0
PULL_TIMEOUT_S = 1800.0
_UNREACHABLE_WORDS = (
    "no such host",
    "connection refused",
    "i/o timeout",
    "network is unreachable",
    "no route to host",
    "deadline exceeded",
    "timeout",
    "tls handshake",
    "server misbehaving",
)

_unreachable: dict[str, str] = {}
_lock = threading.Lock()


class PullOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pulled: bool
    message: str = ""
    """Why not, as the engine said it (empty when pulled)."""


def unreachable_registries() -> dict[str, str]:
    with _lock:
        return dict(_unreachable)


def forget_unreachable() -> None:
    with _lock:
        _unreachable.clear()


def pull_image(reference: str, *, stall_s: float = STALL_S) -> PullOutcome:
    """Pull ``reference`` (blocking). Never raises for a registry's answer or silence."""
    registry = registry_of(reference)
    with _lock:
        known = _unreachable.get(registry)
    if known is not None:
        return PullOutcome(pulled=False, message=f"registry {registry} did not answer ({known})")
    repository, tag = split_reference(reference)
    try:
        client = docker.DockerClient.from_env(timeout=int(stall_s))
    except docker.errors.DockerException as exc:
        return PullOutcome(pulled=False, message=f"no Docker engine to pull with: {exc}")
    try:
        client.api.reload_config()
        for event in client.api.pull(repository, tag=tag, stream=True, decode=True):
            if isinstance(event, dict) and event.get("error"):
                return _failed(registry, str(event["error"]))
        return PullOutcome(pulled=True)
    except docker.errors.APIError as exc:
        return _failed(registry, str(exc.explanation or exc))
    except (requests.RequestException, docker.errors.DockerException) as exc:
        return _failed(registry, f"nothing received for {stall_s:.0f} s ({type(exc).__name__})")
    finally:
        client.close()


def _failed(registry: str, message: str) -> PullOutcome:
    lowered = message.lower()
    silent = "nothing received" in lowered or any(word in lowered for word in _UNREACHABLE_WORDS)
    if silent and "not found" not in lowered and "unauthorized" not in lowered:
        with _lock:
            _unreachable[registry] = message
        return PullOutcome(pulled=False, message=f"registry {registry} did not answer ({message})")
    return PullOutcome(pulled=False, message=message)


def split_reference(reference: str) -> tuple[str, str]:
    """``host:5000/a/b:1@sha256:..`` -> (``host:5000/a/b``, ``1@sha256:..`` or digest)."""
    if "@" in reference:
        name, digest = reference.split("@", 1)
        head, _, last = name.rpartition("/")
        image = last.partition(":")[0]
        return (f"{head}/{image}" if head else image), digest  # by digest; the tag is a label
    name, _, last = reference.rpartition("/")
    if ":" in last:
        image, _, tag = last.partition(":")
        return (f"{name}/{image}" if name else image), tag
    return reference, "latest"
