"""Clean-room and separate grading: furnish a fresh verifier container with the agent's outcome.

``VerifierPhases.fresh_verifier`` stops the agent's container and starts a fresh one of the same
environment (same image and hardening, same sidecars, network and volumes). Into it go only:

- ``clean`` mode: every change the agent made to its container's file system (``carry.py``:
  deletions first, then one tar of the changed entries; ``scope.py`` says what is left out,
  withheld or restored), and the declared ``artifacts`` that the carry leaves out (such as
  ``/logs/artifacts`` when collect hooks wrote it);
- ``separate`` mode (Harbor's): the declared ``artifacts`` and ``/logs/artifacts`` alone.

An artifact on a volume the fresh container mounts too (a compose volume a sidecar writes, say)
is not carried: the verifier sees it in place, as Harbor's does, and may mount it read-only.

A declared artifact replaces whatever the image has at its path, and one the agent left absent
is removed. Nothing else the agent did survives: not its processes, not a pytest or
``sitecustomize.py`` it planted, not its ``/logs/verifier`` or ``/tests``.
What cannot be carried (an artifact over the size cap, an archive that does not extract) makes
the reward invalid (``GradingError``), never a 0.
"""

from __future__ import annotations

import posixpath
import shlex
import uuid
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from envfarm.errors import GradingError
from envfarm.grading.cleanroom.carry import WorkspaceCarry
from envfarm.grading.cleanroom.scope import CarryScope
from envfarm.grading.verifier.collect import MISSING, CopiedPath
from envfarm.sandbox.base import Sandbox
from envfarm.spec.config import EnvironmentMode

APPLY_TIMEOUT_S = 600.0
MAX_LISTED = 500


class VerifierInput(BaseModel):
    """What the verifier's container received (``verifier-input.json`` in the artifacts)."""

    model_config = ConfigDict(extra="forbid")

    mode: EnvironmentMode
    workdir: str | None = None
    carried: list[str] = Field(default_factory=list)
    carried_count: int = 0
    archive_bytes: int = 0
    deleted: list[str] = Field(default_factory=list)
    restored: list[str] = Field(default_factory=list)
    """Test files the agent changed or deleted, graded as the image has them."""
    withheld: list[tuple[str, str]] = Field(default_factory=list)
    """Watched paths the agent changed or deleted, graded as the image has them, and why."""
    rejected: list[tuple[str, str]] = Field(default_factory=list)
    artifacts: list[str] = Field(default_factory=list)


def verifier_input(
    mode: EnvironmentMode, carry: WorkspaceCarry | None, copies: list[CopiedPath]
) -> VerifierInput:
    record = VerifierInput(mode=mode, artifacts=[copy.source for copy in copies])
    if carry is not None:
        record.workdir = carry.workdir
        record.carried = ["/" + p for p in carry.carried[:MAX_LISTED]]
        record.carried_count = len(carry.carried)
        record.archive_bytes = len(carry.archive or b"")
        record.deleted = ["/" + p for p in carry.deleted[:MAX_LISTED]]
        record.restored = ["/" + p for p in carry.restored[:MAX_LISTED]]
        record.withheld = [("/" + p, why) for p, why in carry.withheld[:MAX_LISTED]]
        record.rejected = [("/" + p, why) for p, why in carry.rejected[:MAX_LISTED]]
    return record


def on_shared(path: str, shared: Sequence[str]) -> bool:
    """Whether ``path`` lies on a mount both containers share (``shared``: mount points)."""
    path = "/" + path.strip("/")
    return any(path == m or path.startswith(m.rstrip("/") + "/") for m in shared)


def carried_copies(
    mode: EnvironmentMode,
    copies: list[CopiedPath],
    workdir: str | None,
    shared: Sequence[str] = (),
) -> list[CopiedPath]:
    """The copies a verifier of ``mode`` receives: none on a volume its container shares with
    the agent's (``shared``: it sees that file as the agent left it, and may mount it
    read-only); in clean mode, only those the file system's carry leaves out (it already
    carries the rest)."""
    kept = [c for c in copies if not on_shared(c.source, shared)]
    if mode != "clean" or workdir is None:
        return kept
    scope = CarryScope(workdir=workdir)
    return [c for c in kept if scope.left_out(c.source.strip("/"))]


async def _run(verifier: Sandbox, script: str, what: str) -> None:
    result = await verifier.exec(script, user="root", timeout=APPLY_TIMEOUT_S)
    if result.timed_out or result.exit_code != 0:
        why = "timed out" if result.timed_out else f"exit {result.exit_code}"
        tail = (result.stdout + result.stderr).strip()[-1000:]
        raise GradingError(f"could not carry {what} into the verifier's container ({why}): {tail}")


async def apply_workspace(verifier: Sandbox, carry: WorkspaceCarry) -> None:
    """Delete what the agent deleted, then extract what it changed (paths relative to ``/``)."""
    token = uuid.uuid4().hex
    archive, deletions, errors = (f"/tmp/.envfarm-apply-{token}.{x}" for x in ("tar", "del", "err"))
    if carry.archive:
        await verifier.write_file(archive, carry.archive, mode=0o600)
    if carry.deleted:
        names = b"".join(f"./{p}".encode("utf-8", "surrogateescape") + b"\0" for p in carry.deleted)
        await verifier.write_file(deletions, names, mode=0o600)
    script = (
        "cd / || exit 3\n"
        f"if [ -f {deletions} ]; then xargs -0 -r rm -rf -- < {deletions} || exit 4; fi\n"
        f"if [ -f {archive} ]; then tar -xpf {archive} --numeric-owner 2>{errors} "
        f"|| {{ tail -c 2000 {errors}; exit 5; }}; fi\n"
        f"rm -f {archive} {deletions} {errors}\n"
    )
    await _run(verifier, script, "the agent's changes")


async def apply_copies(verifier: Sandbox, copies: list[CopiedPath]) -> None:
    """Put each copied path in place of the image's; remove the paths the agent left absent."""
    for copy in copies:
        source = copy.source.rstrip("/")
        if not source:
            raise GradingError("the artifact '/' cannot be carried into the verifier's container")
        quoted = shlex.quote(source)
        if copy.archive is None:
            if copy.note != MISSING:
                raise GradingError(f"artifact {copy.source} could not be carried: {copy.note}")
            await _run(verifier, f"rm -rf {quoted}", f"artifact {copy.source}")
            continue
        staging = f"/tmp/.envfarm-artifact-{uuid.uuid4().hex}.tar"
        await verifier.write_file(staging, copy.archive, mode=0o600)
        into = quoted if copy.is_dir else shlex.quote(posixpath.dirname(source) or "/")
        script = (
            f"rm -rf {quoted} && mkdir -p {into} && tar -xpf {staging} -C {into}; "
            f"code=$?; rm -f {staging}; exit $code"
        )
        await _run(verifier, script, f"artifact {copy.source}")
