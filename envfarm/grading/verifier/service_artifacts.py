"""Harbor's ``artifacts`` with ``service``: a path copied out of a sidecar's container.

As Harbor does, they are taken when the agent has stopped, with the main container's: kept under
the episode's ``collected/``, and a ``clean`` or ``separate`` verifier receives them at their path
in its own main container (after the workdir's changes, so they win there), which is how a
Harbor task whose separate verifier grades what a service holds (``/app/submission`` of an MCP
server) works. The engine's archive of the path (its last name as the top entry) is turned
into the form of ``collect.copy_out``: a directory's contents with ``exclude`` applied as tar's
unanchored ``--exclude`` does, or the file itself.
"""

from __future__ import annotations

import io
import tarfile
from fnmatch import fnmatchcase

from envfarm.errors import SandboxError
from envfarm.grading.verifier.collect import MAX_ARTIFACT_BYTES, MISSING, CopiedPath
from envfarm.plan.models import VerifierPlan
from envfarm.sandbox.base import Sandbox, ServiceFiles
from envfarm.spec.config import ArtifactSpec


def service_specs(plan: VerifierPlan) -> list[ArtifactSpec]:
    return [spec for spec in plan.artifacts if spec.sidecar is not None]


async def copy_from_services(sandbox: Sandbox, plan: VerifierPlan) -> list[CopiedPath]:
    return [await copy_from_service(sandbox, spec) for spec in service_specs(plan)]


async def copy_from_service(sandbox: Sandbox, spec: ArtifactSpec) -> CopiedPath:
    """Never raises: what could not be copied is a note."""
    assert spec.sidecar is not None
    destination = (spec.destination or spec.source).lstrip("/") or "root"
    copied = CopiedPath(source=spec.source, destination=destination, service=spec.sidecar)
    if not isinstance(sandbox, ServiceFiles):
        copied.note = f"{type(sandbox).__name__} cannot copy files out of a service container"
        return copied
    try:
        archive = await sandbox.service_archive(spec.sidecar, spec.source, MAX_ARTIFACT_BYTES)
    except SandboxError as exc:
        copied.note = f"could not be copied: {exc}"
        return copied
    if archive is None:
        copied.note = MISSING
    elif len(archive) > MAX_ARTIFACT_BYTES:
        copied.note = f"larger than {MAX_ARTIFACT_BYTES} bytes as a tar; not kept"
    else:
        try:
            copied.is_dir, copied.archive = _as_copied(archive, spec.exclude)
        except tarfile.TarError as exc:
            copied.note = f"could not be read: {exc}"
    return copied


def _excluded(relative: str, patterns: list[str]) -> bool:
    """tar's default ``--exclude``: a pattern matches any trailing part of any leading part."""
    parts = relative.split("/")
    for end in range(1, len(parts) + 1):
        for start in range(end):
            tail = "/".join(parts[start:end])
            if any(fnmatchcase(tail, pattern) for pattern in patterns):
                return True
    return False


def _as_copied(archive: bytes, exclude: list[str]) -> tuple[bool, bytes]:
    """(is a directory, a tar of its contents or of the file) from the engine's archive."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as source:
        members = source.getmembers()
        top = members[0] if members else None
        if top is None or not top.isdir():
            return False, archive
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w") as kept:
            for member in members[1:]:
                relative = member.name.split("/", 1)[1] if "/" in member.name else ""
                if not relative or _excluded(relative, exclude):
                    continue
                member.name = relative
                data = source.extractfile(member) if member.isfile() else None
                kept.addfile(member, data)
        return True, out.getvalue()
