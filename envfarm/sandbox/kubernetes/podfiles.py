"""Volumes of an environment pod: compose volumes, and the task files services mount.

A compose named volume is one ``emptyDir`` shared by the services that mount it (each episode
gets its own, as with Docker); an anonymous volume is an ``emptyDir`` of its own. A bind mount
of the task's files (``./init.sql:/docker-entrypoint-initdb.d/init.sql:ro``) is a copy, never
a mount of anything on the node, exactly like the Docker backend's: the files travel inside
the pod spec as a gzipped tar (``files_archive``; at most ``MAX_ARCHIVE`` bytes encoded, the
pod object must stay well under the API server's size limit), an init container unpacks them
into the ``envfarm-binds`` ``emptyDir``, and each container mounts its copy with ``subPath``
(read-only for ``:ro``). No ConfigMap or other object is needed, so nothing outlives the pod.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import re
import tarfile
from typing import Any

from envfarm.errors import TaskSpecError
from envfarm.plan.models import EnvironmentSpec
from envfarm.sandbox.files import add_as_root
from envfarm.spec.compose import ComposeService, VolumeMount

BINDS_VOLUME = "envfarm-binds"
BINDS_DIR = "/envfarm-binds"
MAX_ARCHIVE = 512 * 1024


def dns_label(text: str, prefix: str = "") -> str:
    """A valid DNS-1123 label from ``text`` (a hash keeps distinct inputs distinct)."""
    clean = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    label = f"{prefix}{clean}" if clean else prefix.rstrip("-") or "x"
    if clean != text or len(label) > 63:
        digest = hashlib.sha256(text.encode()).hexdigest()[:8]
        label = f"{label[:54].rstrip('-')}-{digest}"
    return label


def _bind_entries(environment: EnvironmentSpec) -> list[tuple[int, str, VolumeMount]]:
    """(index, service name, mount) for every bind mount, in a stable order."""
    if environment.compose is None:
        return []
    entries: list[tuple[int, str, VolumeMount]] = []
    for name in sorted(environment.compose.services):
        for mount in environment.compose.services[name].volumes:
            if mount.kind == "bind":
                entries.append((len(entries), name, mount))
    return entries


def files_archive(environment: EnvironmentSpec) -> str | None:
    """The base64 of a gzipped tar placing bind mount ``i``'s files under ``i/``; None when
    no service mounts task files."""
    entries = _bind_entries(environment)
    if not entries:
        return None
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for index, _, mount in entries:
            assert mount.source is not None  # a bind mount always has its source
            source = environment.environment_dir / mount.source
            if source.is_file():
                add_as_root(archive, source, f"{index}/{source.name}", read_only=mount.read_only)
                continue
            add_as_root(archive, source, str(index), read_only=mount.read_only)
            for path in sorted(source.rglob("*")):
                name = f"{index}/{path.relative_to(source).as_posix()}"
                add_as_root(archive, path, name, read_only=mount.read_only)
    encoded = base64.b64encode(gzip.compress(buffer.getvalue(), mtime=0)).decode()
    if len(encoded) > MAX_ARCHIVE:
        assert environment.compose is not None
        raise TaskSpecError(
            str(environment.compose.path),
            f"the task files mounted into services take {len(encoded)} bytes compressed and "
            f"encoded; the Kubernetes backend carries at most {MAX_ARCHIVE} in the pod spec. "
            "Build large files into the service's image instead",
            field="services.*.volumes",
        )
    return encoded


def _volume_name(name: str) -> str:
    return dns_label(name, "vol-")


def pod_volumes(environment: EnvironmentSpec) -> list[dict[str, Any]]:
    """Every ``emptyDir`` of the pod but the helper's."""
    volumes: dict[str, dict[str, Any]] = {}
    if _bind_entries(environment):
        volumes[BINDS_VOLUME] = {"name": BINDS_VOLUME, "emptyDir": {}}
    if environment.compose is not None:
        for name in environment.compose.volumes:
            volumes[_volume_name(name)] = {"name": _volume_name(name), "emptyDir": {}}
        for service in environment.compose.services.values():
            for index, mount in enumerate(m for m in service.volumes if m.kind == "volume"):
                if mount.source is None:
                    label = _anonymous(service, index)
                    volumes[label] = {"name": label, "emptyDir": {}}
    return list(volumes.values())


def _anonymous(service: ComposeService, index: int) -> str:
    return dns_label(f"{service.name}-{index}", "anon-")


def volume_mounts(environment: EnvironmentSpec, service: ComposeService) -> list[dict[str, Any]]:
    """The mounts of one container (``service``: the compose service it runs)."""
    mounts = []
    for index, name, mount in _bind_entries(environment):
        if name != service.name:
            continue
        assert mount.source is not None
        source = environment.environment_dir / mount.source
        sub_path = f"{index}/{source.name}" if source.is_file() else str(index)
        entry = {"name": BINDS_VOLUME, "mountPath": mount.target, "subPath": sub_path}
        mounts.append(entry | ({"readOnly": True} if mount.read_only else {}))
    volumes = [m for m in service.volumes if m.kind == "volume"]
    for index, mount in enumerate(volumes):
        volume = _volume_name(mount.source) if mount.source else _anonymous(service, index)
        entry = {"name": volume, "mountPath": mount.target}
        mounts.append(entry | ({"readOnly": True} if mount.read_only else {}))
    return mounts
