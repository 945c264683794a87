"""Pod status shapes the simulated kubelet writes: running (with readiness), terminated,
failed (pure functions)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envfarm.k8s.api import KubeObject
from envfarm.k8s.objects import deep_copy, now_rfc3339


def running_status(
    pod: KubeObject, ready: dict[str, bool], next_ip: Callable[[], str]
) -> dict[str, Any]:
    old = pod.get("status") or {}
    started = old.get("startTime") or now_rfc3339()
    statuses, previous = [], {s["name"]: s for s in old.get("containerStatuses", [])}
    for container in pod["spec"]["containers"]:
        before = previous.get(container["name"], {})
        if "terminated" in before.get("state", {}):
            statuses.append(before)
            continue
        statuses.append(
            {
                "name": container["name"],
                "image": container.get("image", ""),
                "ready": ready.get(container["name"], False),
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": started}},
            }
        )
    all_ready = all(s["ready"] for s in statuses)
    flag = "True" if all_ready else "False"
    return {
        "phase": "Running",
        "startTime": started,
        "hostIP": "10.0.0.1",
        "podIP": old.get("podIP") or next_ip(),
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Initialized", "status": "True"},
            {"type": "ContainersReady", "status": flag},
            {"type": "Ready", "status": flag},
        ],
        "containerStatuses": statuses,
    }


def terminated_status(pod: KubeObject, exits: dict[str, tuple[int, str]] | None) -> dict[str, Any]:
    """``exits``: container -> (exit code, reason); None: every container stopped (137)."""
    status = deep_copy(pod.get("status") or {})
    statuses = status.get("containerStatuses") or [
        {"name": c["name"], "ready": False, "restartCount": 0, "state": {}}
        for c in pod["spec"]["containers"]
    ]
    for entry in statuses:
        if exits is not None and entry["name"] not in exits:
            continue
        if "terminated" in entry.get("state", {}):
            continue
        code, reason = (exits or {}).get(entry["name"], (137, "Error"))
        entry["ready"] = False
        entry["state"] = {
            "terminated": {"exitCode": code, "reason": reason, "finishedAt": now_rfc3339()}
        }
    status["containerStatuses"] = statuses
    for condition in status.get("conditions", []):
        if condition["type"] in ("Ready", "ContainersReady"):
            condition["status"] = "False"
    if exits is None or all("terminated" in s["state"] for s in statuses):
        codes = [s["state"]["terminated"]["exitCode"] for s in statuses]
        status["phase"] = "Succeeded" if not any(codes) else "Failed"
    return status


def failed_status(pod: KubeObject, reason: str, message: str) -> dict[str, Any]:
    status = terminated_status(pod, None)
    status.update(phase="Failed", reason=reason, message=message)
    return status
