"""Per-episode grading artifacts on the host, and reading them back for ``envfarm regrade``.

Layout of ``OUT/artifacts/<episode_id>/`` (the episode's final attempt; a retry replaces it):

```
episode.json        ids, task id and directory, task hash, attempt, what could not be kept
verifier.json       test.sh's exit code, timeout, duration, files not kept whole
verifier/           the files of /logs/verifier: test-stdout.txt, reward files, reports
reports.json        the parsed reports (per-test name, status, duration)
inspection.json     the tamper and command flags with their evidence, the workspace changes
workspace/diff.patch    unified diff of the changed text files (size-capped)
workspace/changed.tar   the added and modified files as they were after the agent
collect.json        [[verifier.collect]] hooks: exit code and output tail
verifier-input.json what a clean or separate verifier's container received from the agent
collected/<dest>/   declared artifacts and /logs/artifacts (as logs-artifacts/)
build.log           the image build output (its last 1 MB), when the backend kept it
processes/          the output of the image's entrypoint (its last 1 MB), when one ran
```

Regrading needs only ``episode.json``, ``verifier.json``, ``verifier/`` and ``inspection.json``.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict, Field

from envfarm.grading.cleanroom.receive import VerifierInput
from envfarm.grading.tamper.inspection import Inspection
from envfarm.grading.verifier.collect import CopiedPath, HookResult
from envfarm.grading.verifier.reports import ParsedReport
from envfarm.grading.verifier.verdict import VerifierOutput

EPISODE_FILE = "episode.json"
VERIFIER_FILE = "verifier.json"
INSPECTION_FILE = "inspection.json"
BUILD_LOG_CHARS = 1_000_000


class EpisodeRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    trajectory_id: str
    episode_id: str
    attempt: int
    task_id: str
    task_root: str
    task_hash: str
    notes: list[str] = Field(default_factory=list)
    """What could not be kept, and why."""


class VerifierRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    exit_code: int | None = None
    timed_out: bool = False
    timeout_sec: float = 0.0
    duration_s: float = 0.0
    omitted: dict[str, str] = Field(default_factory=dict)


@dataclass
class Bundle:
    """Everything one episode's grading kept in memory, written in one go by ``write_bundle``."""

    record: EpisodeRecord
    verifier: VerifierOutput | None = None
    reports: list[ParsedReport] = field(default_factory=list)
    inspection: Inspection | None = None
    diff: str | None = None
    changed_tar: bytes | None = None
    hooks: list[HookResult] = field(default_factory=list)
    copies: list[CopiedPath] = field(default_factory=list)
    build_log: str | None = None
    verifier_input: VerifierInput | None = None
    process_logs: dict[str, bytes] = field(default_factory=dict)


def _safe_relative(name: str) -> PurePosixPath | None:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        return None
    return path


def _extract(data: bytes, target: Path, notes: list[str], source: str) -> None:
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        if hasattr(tarfile, "data_filter"):
            archive.extractall(target, filter="data")
        else:  # Python < 3.11.4: keep the archive rather than extract it unsafely
            (target.parent / f"{target.name}.tar").write_bytes(data)
            notes.append(f"{source}: kept as a tar (this Python cannot extract it safely)")


def _write_copy(copy: CopiedPath, collected: Path, notes: list[str]) -> None:
    shown = f"{copy.service}:{copy.source}" if copy.service else copy.source
    destination = _safe_relative(copy.destination)
    if destination is None:
        notes.append(f"artifact {shown}: bad destination {copy.destination!r}")
        return
    if copy.archive is None:
        notes.append(f"artifact {shown}: {copy.note or 'not copied'}")
        return
    target = collected / destination
    if copy.is_dir:
        _extract(copy.archive, target, notes, shown)
        return
    with tarfile.open(fileobj=io.BytesIO(copy.archive)) as archive:
        member = next((m for m in archive if m.isfile()), None)
        extracted = archive.extractfile(member) if member is not None else None
        if extracted is None:
            notes.append(f"artifact {shown}: not a regular file")
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(extracted.read())


def _dump(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def write_bundle(root: Path, bundle: Bundle) -> None:
    """Replace ``root`` with the bundle's files (blocking: run it in a worker thread)."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    notes = list(bundle.record.notes)
    if bundle.verifier is not None:
        output = bundle.verifier
        for name, data in sorted(output.files.items()):
            relative = _safe_relative(name)
            if relative is None:
                notes.append(f"verifier file {name!r} not kept: unsafe name")
                continue
            (root / "verifier" / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / "verifier" / relative).write_bytes(data)
        verifier_record = VerifierRecord(
            exit_code=output.exit_code,
            timed_out=output.timed_out,
            timeout_sec=output.timeout_sec,
            duration_s=output.duration_s,
            omitted=output.omitted,
        )
        _dump(root / VERIFIER_FILE, verifier_record.model_dump(mode="json"))
    if bundle.reports:
        _dump(
            root / "reports.json",
            [
                {
                    "name": r.name,
                    "format": r.format,
                    "claimed_total": r.claimed_total,
                    "problem": r.problem,
                    "tests": [t.model_dump(mode="json") for t in r.tests],
                }
                for r in bundle.reports
            ],
        )
    if bundle.inspection is not None:
        _dump(root / INSPECTION_FILE, bundle.inspection.model_dump(mode="json"))
    if bundle.diff is not None or bundle.changed_tar is not None:
        (root / "workspace").mkdir()
        if bundle.diff is not None:
            (root / "workspace" / "diff.patch").write_text(bundle.diff, encoding="utf-8")
        if bundle.changed_tar is not None:
            (root / "workspace" / "changed.tar").write_bytes(bundle.changed_tar)
    if bundle.hooks:
        _dump(root / "collect.json", [hook.model_dump(mode="json") for hook in bundle.hooks])
    if bundle.verifier_input is not None:
        _dump(root / "verifier-input.json", bundle.verifier_input.model_dump(mode="json"))
    for copy in bundle.copies:
        _write_copy(copy, root / "collected", notes)
    if bundle.build_log:
        (root / "build.log").write_text(bundle.build_log[-BUILD_LOG_CHARS:], encoding="utf-8")
    for name, data in sorted(bundle.process_logs.items()):
        if (relative := _safe_relative(name)) is not None and len(relative.parts) == 1:
            (root / "processes").mkdir(exist_ok=True)
            (root / "processes" / relative).write_bytes(data[-BUILD_LOG_CHARS:])
    record = bundle.record.model_copy(update={"notes": notes})
    _dump(root / EPISODE_FILE, record.model_dump(mode="json"))


def load_record(root: Path) -> EpisodeRecord:
    return EpisodeRecord.model_validate_json((root / EPISODE_FILE).read_text(encoding="utf-8"))


def load_verifier_output(root: Path) -> VerifierOutput | None:
    """The verifier run kept in ``root``; None when the verifier never ran."""
    path = root / VERIFIER_FILE
    if not path.is_file():
        return None
    record = VerifierRecord.model_validate_json(path.read_text(encoding="utf-8"))
    files: dict[str, bytes] = {}
    base = root / "verifier"
    if base.is_dir():
        for file in sorted(p for p in base.rglob("*") if p.is_file()):
            files[file.relative_to(base).as_posix()] = file.read_bytes()
    return VerifierOutput(
        exit_code=record.exit_code,
        timed_out=record.timed_out,
        timeout_sec=record.timeout_sec,
        duration_s=record.duration_s,
        files=files,
        omitted=record.omitted,
    )


def load_inspection(root: Path) -> Inspection | None:
    path = root / INSPECTION_FILE
    if not path.is_file():
        return None
    return Inspection.model_validate_json(path.read_text(encoding="utf-8"))
