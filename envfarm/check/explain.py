"""What ``envfarm check`` adds to a verdict so that it explains itself.

An oracle that misses the maximum is shown with the last lines of the verifier's output
(``verifier/test-stdout.txt`` of the episode's artifacts) and the artifacts' directory, so the
author sees why without rerunning anything (a verifier that gave no reward has its last lines
in the problem already: the note then says where all of them are, rather than repeating them);
when the verifier had no network and ``test.sh`` downloads at grading time, that is named as
the likely cause (``network_cause``), and so is a clean room that stopped what the oracle left
running (``mode_cause``: a server the tests need lives only in ``shared`` mode, Harbor's
default; the clean room stays envfarm's). ``image_findings`` turns the offline resolution of a
task's base images (``sandbox.baseimages``) into lint findings for ``--no-run``.
"""

from __future__ import annotations

from pathlib import Path

from envfarm.check.verdicts import EPSILON, TaskCheck
from envfarm.grading.artifacts import EPISODE_FILE, VERIFIER_FILE, EpisodeRecord, VerifierRecord
from envfarm.grading.cleanroom.leftovers import stopped_in
from envfarm.grading.verifier.verdict import STDOUT_FILE, TAIL_HEADING
from envfarm.models.trajectory import Trajectory
from envfarm.sandbox.images.offline import BaseResolution
from envfarm.spec.findings import Finding, error, warning
from envfarm.spec.lint import grading_download
from envfarm.spec.network import VERIFIER_NETWORK_ENV
from envfarm.spec.task import Task

TAIL_LINES = 20


def _missed(check: TaskCheck, trajectory: Trajectory) -> bool:
    reward = trajectory.reward
    return not reward.valid or reward.value is None or reward.value < check.max_reward - EPSILON


def explain_oracle(check: TaskCheck, runs: list[Trajectory], out_dir: Path) -> list[str]:
    """For the first oracle run below the maximum: where its artifacts are and the tail of the
    verifier's output (``out_dir``: the directory trajectories' ``artifacts`` are relative to)."""
    missed = next((t for t in runs if _missed(check, t)), None)
    if missed is None:
        return []
    if missed.artifacts is None:
        if missed.error is None and missed.steps:
            why = "its steps stopped before the last one, whose grading keeps them"
        else:
            why = f"the {missed.error.phase if missed.error else 'grading'} phase failed"
        return [f"oracle {missed.episode_id}: no artifacts kept ({why})"]
    root = out_dir / missed.artifacts
    return [f"oracle {missed.episode_id}: artifacts in {root}", *_verifier_output(root, missed)]


def _verifier_output(root: Path, missed: Trajectory) -> list[str]:
    """The tail of what the verifier printed; where it is when a verifier that gave no reward
    quoted its end in the problem already; else why there is none."""
    stdout = root / "verifier" / STDOUT_FILE
    try:
        lines = stdout.read_text(encoding="utf-8", errors="replace").rstrip().splitlines()
    except OSError:
        return [_no_stdout(root, missed)]
    if not lines:
        return [f"the verifier printed nothing ({STDOUT_FILE} is empty)"]
    if missed.error is not None and TAIL_HEADING in missed.error.message:
        return [f"the verifier's output ({len(lines)} lines, its end quoted above): {stdout}"]
    shown = lines[-TAIL_LINES:]
    cut = f"last {len(shown)} of {len(lines)} lines" if len(lines) > len(shown) else "all"
    return [f"verifier output ({cut}):", *(f"  | {line}" for line in shown)]


def _no_stdout(root: Path, missed: Trajectory) -> str:
    try:
        record = VerifierRecord.model_validate_json((root / VERIFIER_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        error = missed.error
        failed = f": the {error.phase} phase failed ({error.type})" if error is not None else ""
        return f"no verifier output was kept{failed}"
    if (omitted := record.omitted.get(STDOUT_FILE)) is not None:
        return f"the verifier's {STDOUT_FILE} was not kept: {omitted}"
    return (
        f"the verifier left no {STDOUT_FILE}: tests/test.sh removed it (or /logs/verifier), "
        "or it could not be written"
    )


def network_cause(task: Task, check: TaskCheck, runs: list[Trajectory]) -> list[str]:
    """The likely cause of a missed oracle whose verifier had no network but downloads."""
    if not any(_missed(check, t) for t in runs) or task.config.verifier_network():
        return []
    download = grading_download(task)
    if download is None:
        return []
    if task.config.verifier_network_set() is False:
        why = "the task sets no-network"
    elif task.config.verifier.environment_mode == "shared":
        why = "a shared verifier runs in the agent's container, which has none"
    else:
        why = f"{VERIFIER_NETWORK_ENV}=none / --verifier-network none"
    return [
        f"likely cause: the verifier had no network ({why}) and {download} downloads at "
        'grading time; set [verifier] network_mode = "public" or install it in the image'
    ]


def mode_cause(task: Task, check: TaskCheck, runs: list[Trajectory], out_dir: Path) -> list[str]:
    """The likely cause of a missed oracle whose clean room stopped what it left running."""
    if task.config.verifier.environment_mode == "shared":
        return []
    missed = next((t for t in runs if _missed(check, t) and t.artifacts is not None), None)
    if missed is None or missed.artifacts is None:
        return []
    try:
        text = (out_dir / missed.artifacts / EPISODE_FILE).read_text(encoding="utf-8")
        stopped = stopped_in(EpisodeRecord.model_validate_json(text).notes)
    except (OSError, ValueError):
        return []
    if stopped is None:
        return []
    mode = task.config.verifier.environment_mode
    return [
        f"likely cause: the {mode} verifier runs where nothing the oracle left running survives, "
        f"and it stopped: {stopped}; if the tests grade a process the solution starts, set "
        '[verifier] environment_mode = "shared" (Harbor\'s default), and compare the modes '
        "with envfarm check --compare-modes"
    ]


def image_findings(resolutions: list[BaseResolution]) -> list[Finding]:
    found: list[Finding] = []
    for item in resolutions:
        if item.how == "error":
            found += [error("images", note) for note in item.notes]
        elif item.how == "pull":
            found.append(
                warning(
                    "images",
                    f"{item.where}: {item.reference!r} is neither an image the engine holds nor "
                    "one with an offline substitute: a run pulls it, so a registry must answer",
                )
            )
        elif item.how.startswith("alias:"):
            recipe = item.how.removeprefix("alias:")
            found += [
                warning("images", f"{item.where}: {item.reference!r} -> recipe {recipe}: {note}")
                for note in item.notes
            ]
    return found
