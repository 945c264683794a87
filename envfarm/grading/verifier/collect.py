"""Harbor's ``[[verifier.collect]]`` hooks and root ``artifacts``: state kept after the agent.

Both run after the agent has stopped and before the verifier starts (so ``tests/test.sh`` can
read what the hooks wrote). ``/logs/artifacts`` is emptied first: only what the hooks write
there counts, nothing the agent left. A hook's failure or timeout is recorded, not an error:
a database the agent dropped is the outcome, and the verifier decides what it is worth.
Declared artifact paths are copied out as tar archives, each capped in size: the main
container's here, a sidecar's (``service``) by ``service_artifacts.py``.
"""

from __future__ import annotations

import shlex
import uuid

from pydantic import BaseModel, ConfigDict

from envfarm.plan.models import VerifierPlan
from envfarm.sandbox.base import Sandbox
from envfarm.spec.config import ArtifactSpec

ARTIFACTS_DIR = "/logs/artifacts"
MAX_ARTIFACT_BYTES = 64 * 1024 * 1024
OUTPUT_TAIL_CHARS = 4000
MISSING = "does not exist"


class HookResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str
    exit_code: int | None
    timed_out: bool
    duration_s: float
    output: str
    """The tail of its stdout and stderr."""


class CopiedPath(BaseModel):
    """One path copied out of the sandbox: ``archive`` holds it as a tar, or ``note`` says why
    it does not."""

    model_config = ConfigDict(extra="forbid")

    source: str
    destination: str
    service: str | None = None
    """The sidecar it was copied from (None: the main container)."""
    note: str | None = None
    is_dir: bool = False
    archive: bytes | None = None


async def run_collect_hooks(sandbox: Sandbox, plan: VerifierPlan) -> list[HookResult]:
    await sandbox.exec(f"rm -rf {ARTIFACTS_DIR} && mkdir -p {ARTIFACTS_DIR}", user="root")
    results = []
    for hook in plan.config.collect:
        result = await sandbox.exec(
            hook.command,
            timeout=hook.timeout_sec,
            workdir=plan.workdir,
            env=dict(plan.env),
            user=hook.user or "root",
        )
        output = (result.stdout + result.stderr)[-OUTPUT_TAIL_CHARS:]
        results.append(
            HookResult(
                command=hook.command,
                exit_code=result.exit_code,
                timed_out=result.timed_out,
                duration_s=result.duration_s,
                output=output,
            )
        )
    return results


async def copy_out(sandbox: Sandbox, spec: ArtifactSpec) -> CopiedPath:
    """Tar ``spec.source`` (a file or a directory) out of the sandbox."""
    destination = (spec.destination or spec.source).lstrip("/") or "root"
    copied = CopiedPath(source=spec.source, destination=destination)
    staging = f"/tmp/.envfarm-artifact-{uuid.uuid4().hex}.tar"
    source = shlex.quote(spec.source)
    parent, _, name = spec.source.rstrip("/").rpartition("/")
    excludes = " ".join(f"--exclude={shlex.quote(pattern)}" for pattern in spec.exclude)
    result = await sandbox.exec(
        f"if [ -d {source} ]; then echo dir; tar -C {source} {excludes} -cf {staging} .; "
        f"elif [ -e {source} ]; then tar -C {shlex.quote(parent or '/')} -cf {staging} "
        f"{shlex.quote(name)}; else echo missing; exit 0; fi 2>&1 | tail -c 2000; "
        f"size=$(stat -c %s {staging} 2>/dev/null || echo 0); "
        f'[ "$size" -gt {MAX_ARTIFACT_BYTES} ] && echo "over $size"; true',
        user="root",
        timeout=300,
    )
    copied.is_dir = result.stdout.startswith("dir")
    try:
        if "missing" in result.stdout.splitlines()[:1]:
            copied.note = MISSING
        elif "over " in result.stdout:
            copied.note = f"larger than {MAX_ARTIFACT_BYTES} bytes as a tar; not kept"
        else:
            copied.archive = await sandbox.read_file(staging)
    except OSError as exc:
        copied.note = f"could not be copied: {exc}"
    finally:
        await sandbox.exec(f"rm -f {staging}", user="root", timeout=60)
    return copied


async def collect(
    sandbox: Sandbox, plan: VerifierPlan, *, keep: bool
) -> tuple[list[HookResult], list[CopiedPath]]:
    """Run the hooks; when ``keep``, copy out the declared artifacts and ``/logs/artifacts``
    (kept with the episode's artifacts, and carried into a clean or separate verifier)."""
    hooks = await run_collect_hooks(sandbox, plan) if plan.config.collect else []
    copies: list[CopiedPath] = []
    if keep:
        specs = [spec for spec in plan.artifacts if spec.sidecar is None]
        if plan.config.collect:
            specs.append(ArtifactSpec(source=ARTIFACTS_DIR, destination="logs-artifacts"))
        copies = [await copy_out(sandbox, spec) for spec in specs]
    return hooks, copies
