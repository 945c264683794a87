"""Reading an environment pod's status: ready yet, failed for good, or why it went away.

``start_verdict`` answers a readiness wait: True once the pod is Ready (every container
running and every readiness probe passing, which includes every service's healthcheck);
``SandboxStartError`` naming the service and the reason when it cannot become ready (a
container exited or was OOM-killed, an image cannot be pulled, the pod failed or was deleted);
None while it is still on its way (scheduling, pulling, probing). ``describe`` says where a pod
is, for a start that timed out and for a sandbox that died mid-episode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envfarm.errors import SandboxStartError
from envfarm.k8s.api import KubeObject

FATAL_WAITING = {
    "ErrImagePull": "its image cannot be pulled",
    "ImagePullBackOff": "its image cannot be pulled",
    "InvalidImageName": "its image name is invalid",
    "ErrImageNeverPull": "its image is not on the node and the pull policy is Never",
    "CreateContainerConfigError": "its configuration is invalid",
    "CreateContainerError": "it could not be created",
    "RunContainerError": "it could not be started",
}


def _condition(pod: KubeObject, kind: str) -> dict[str, Any]:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return {}


def _statuses(pod: KubeObject) -> list[dict[str, Any]]:
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def _terminated(entry: dict[str, Any]) -> str:
    ended = entry["state"]["terminated"]
    reason = ended.get("reason") or "exited"
    why = "was killed by the OOM killer" if reason == "OOMKilled" else f"ended ({reason})"
    message = f": {ended['message'].strip()}" if ended.get("message") else ""
    return f"container {entry['name']!r} {why} with exit code {ended.get('exitCode')}{message}"


def describe(pod: KubeObject | None) -> str:
    """Where the pod is, in a sentence or two."""
    if pod is None:
        return "the pod was deleted"
    status = pod.get("status") or {}
    parts = [f"phase {status.get('phase', 'unknown')}"]
    if status.get("reason"):
        deadline = status["reason"] == "DeadlineExceeded"
        parts.append(
            "the environment's TTL (activeDeadlineSeconds) expired"
            if deadline
            else f"{status['reason']}: {status.get('message', '')}".strip()
        )
    scheduled = _condition(pod, "PodScheduled")
    if scheduled.get("status") == "False":
        parts.append(f"not scheduled: {scheduled.get('message') or scheduled.get('reason')}")
    for entry in _statuses(pod):
        state = entry.get("state") or {}
        if "terminated" in state and entry["name"] != "envfarm-helper":
            if not (entry["name"] == "envfarm-files" and state["terminated"].get("exitCode") == 0):
                parts.append(_terminated(entry))
        elif "waiting" in state and state["waiting"].get("reason"):
            waiting = state["waiting"]
            parts.append(f"container {entry['name']!r} waiting: {waiting['reason']}")
        elif "running" in state and entry.get("ready") is False:
            parts.append(f"container {entry['name']!r} not ready (its healthcheck has not passed)")
    if pod.get("metadata", {}).get("deletionTimestamp"):
        parts.append("it is being deleted")
    return "; ".join(parts)


def start_verdict(pod: KubeObject | None) -> bool | None:
    if pod is None or pod.get("metadata", {}).get("deletionTimestamp"):
        raise SandboxStartError(f"the environment pod went away while starting: {describe(pod)}")
    status = pod.get("status") or {}
    if status.get("phase") in ("Failed", "Succeeded"):
        raise SandboxStartError(f"the environment pod ended before it was ready: {describe(pod)}")
    for entry in _statuses(pod):
        _refuse_waiting(entry)
        init = entry["name"] in ("envfarm-helper", "envfarm-files")
        ended = (entry.get("state") or {}).get("terminated")
        if ended is not None and not (init and ended.get("exitCode") == 0):
            raise SandboxStartError(f"the environment could not start: {_terminated(entry)}")
    if status.get("phase") == "Running" and _condition(pod, "Ready").get("status") == "True":
        return True
    return None


def ephemeral_verdict(name: str) -> Callable[[KubeObject | None], bool | None]:
    """``start_verdict`` for the ephemeral container ``name`` added to a running pod: True once
    it runs; SandboxStartError when it cannot start, ended, or its pod went away."""

    def verdict(pod: KubeObject | None) -> bool | None:
        if pod is None or pod.get("metadata", {}).get("deletionTimestamp"):
            raise SandboxStartError(f"the pod went away before {name!r} started: {describe(pod)}")
        for entry in (pod.get("status") or {}).get("ephemeralContainerStatuses") or []:
            if entry.get("name") != name:
                continue
            _refuse_waiting(entry)
            state = entry.get("state") or {}
            if "terminated" in state:
                raise SandboxStartError(f"{_terminated(entry)} at its start")
            return "running" in state or None
        return None

    return verdict


def _refuse_waiting(entry: dict[str, Any]) -> None:
    """SandboxStartError when the container waits for what will not come (its image...)."""
    waiting = (entry.get("state") or {}).get("waiting") or {}
    reason = waiting.get("reason")
    if reason in FATAL_WAITING:
        image = entry.get("image", "")
        raise SandboxStartError(
            f"container {entry['name']!r} cannot start: {FATAL_WAITING[reason]} "
            f"({reason}, image {image!r}): {waiting.get('message', '')}".rstrip(": ")
        )
