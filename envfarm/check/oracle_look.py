"""``envfarm check``'s look inside the image, taken in each task's first oracle episode.

The inspection of ``leaks`` needs the state the agent starts from and the state the solution
leaves, and the first oracle episode's sandbox passes through both; so the look is taken there
(``OracleLooks``, the oracle runner's ``EpisodeWatcher``), reading only, and no throwaway
sandbox is started for it. Before the solution is uploaded: the time ``T``, the snapshot of the
working directory, a listing (path, size) of every file that could be compared, the search for
the hidden test logic and solve scripts, the git repositories in or above the working
directory. After the oracle, before grading: the outputs (``leaks.outputs_between``), the files
of the outputs' sizes with their change times and hashes, and each repository asked for the
outputs' blobs.

What the solution touched is told by change time (no process in the sandbox can set a ctime; a
rename sets it too): a file unchanged since ``T`` holds its pristine content, and inside the
working directory the first snapshot has it. A listed file of an output's size elsewhere that is
changed or gone, or a git repository's object store changed since ``T``, leaves the pristine
content unknown (a changed ref, as ``git bisect`` leaves, does not: the objects decide whether
the history holds an output, the refs only which commit the finding names): the search is then
taken again in a pristine throwaway sandbox (``leaks.search_pristine``), as the whole inspection
is when no oracle episode reached its grading (``leaks.inspect_image``). Files under
``__pycache__`` and ``.pytest_cache`` are caches the solution's own runs rewrite: never a reason
to look again.
"""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from envfarm.check.leaks import (
    GIT,
    NO_GIT,
    PRUNED_NAMES,
    REPOS,
    SNAPSHOT,
    Snapshot,
    Solved,
    Wanted,
    find_by_size,
    git_findings,
    git_lookup,
    git_unreadable,
    hit_findings,
    inspect_image,
    outputs_between,
    parse_hashes,
    parse_snapshot,
    run_script,
    search_pristine,
    solve_failed,
    wanted_hidden,
    wanted_outputs,
)
from envfarm.controller.episode import EpisodeRequest
from envfarm.errors import EnvfarmError, SandboxError
from envfarm.models.trajectory import Trajectory
from envfarm.policy.builtin import ORACLE_COMMAND
from envfarm.sandbox.base import PreparedImage, Sandbox, SandboxBackend
from envfarm.spec.findings import Finding
from envfarm.spec.hidden_files import MIN_COMPARED_BYTES
from envfarm.spec.task import Task

log = logging.getLogger(__name__)
CACHES = ("__pycache__", ".pytest_cache")
"""Directories whose files are caches: what the solution rewrites there is never compared."""


@dataclass
class _Pristine:
    since: float
    before: Snapshot
    files: dict[str, int]
    """Path -> size of every file that could be compared (``MIN_COMPARED_BYTES`` to 20 MiB)."""
    hidden: list[Finding]
    repos: list[str]
    no_git: list[Finding]


@dataclass
class _Look:
    episode: tuple[str, int]
    pristine: _Pristine | None = None
    findings: list[Finding] | None = None
    """Every finding, when the episode's look decided them all."""
    undecided: Solved | None = None
    """The outputs, when a pristine sandbox must be searched for them."""


@dataclass
class OracleLooks:
    """The oracle runner's watcher: the first oracle episode of each task takes its look."""

    _looks: dict[str, _Look] = field(default_factory=dict)

    async def before_agent(self, request: EpisodeRequest, sandbox: Sandbox) -> None:
        task = request.task
        if task.id in self._looks or task.solution_dir is None:
            return
        look = self._looks[task.id] = _Look((request.episode_id, request.attempt))
        try:
            look.pristine = await _pristine(sandbox, task)
        except EnvfarmError:
            return  # the episode says what went wrong; the inspection starts its own sandboxes

    async def after_agent(
        self, request: EpisodeRequest, sandbox: Sandbox, trajectory: Trajectory
    ) -> None:
        look = self._looks.get(request.task.id)
        if look is None or look.pristine is None:
            return
        if look.episode != (request.episode_id, request.attempt):
            return
        try:
            await _solved(sandbox, request.task, look, trajectory)
        except EnvfarmError:
            return

    def decided(self, task_id: str) -> list[Finding] | None:
        """The task's findings, when its episode's look decided them all."""
        look = self._looks.get(task_id)
        return look.findings if look is not None else None

    async def complete(
        self, task: Task, backend: SandboxBackend, image: PreparedImage, *, run_id: str
    ) -> list[Finding]:
        """The findings the look left undecided, from a pristine sandbox; the whole inspection
        when no episode took the look."""
        look = self._looks.get(task.id)
        if look is not None and look.undecided is not None:
            return await search_pristine(backend, task, image, look.undecided, run_id=run_id)
        return await inspect_image(backend, task, image, run_id=run_id)


async def _pristine(sandbox: Sandbox, task: Task) -> _Pristine:
    hidden = wanted_hidden(task)
    listing = f"-size +{MIN_COMPARED_BYTES - 1}c -size -20M -printf 'L %s %p\\n'"
    # one walk lists the files and hashes those of a hidden file's size
    search = find_by_size(hidden, "-exec sha256sum {} +", listing=listing)
    script = f"""echo "T $(date +%s.%N)"
{SNAPSHOT}
{search} 2>/dev/null
{REPOS}
for repo in $repos; do echo "R $repo"; done
{NO_GIT}
"""
    text = await run_script(sandbox, task, script)
    lines = text.splitlines()
    if not lines or not lines[0].startswith("T "):
        raise SandboxError("the look inside the image printed no time")
    files = {}
    for line in lines:
        if line.startswith("L "):
            size, _, path = line[2:].partition(" ")
            files[path] = int(size)
    return _Pristine(
        since=float(lines[0][2:]),
        before=parse_snapshot(text),
        files=files,
        hidden=hit_findings(parse_hashes(text), hidden),
        repos=[line[2:] for line in lines if line.startswith("R ")],
        no_git=git_unreadable(text),
    )


async def _solved(sandbox: Sandbox, task: Task, look: _Look, trajectory: Trajectory) -> None:
    assert look.pristine is not None
    pristine = look.pristine
    solved = Solved(findings=solve_failed(_solve_exit(trajectory)))
    after = parse_snapshot(await run_script(sandbox, task, SNAPSHOT))
    solved.outputs = outputs_between(pristine.before, after)
    if not solved.outputs:
        look.findings = [*solved.findings, *pristine.hidden, *pristine.no_git]
        return
    outputs = wanted_outputs(solved)
    paths = " ".join(shlex.quote(p) for p in sorted(solved.outputs))
    search = find_by_size(outputs, "-printf 'C %C@ %p\\n' -exec sha256sum {} + 2>/dev/null")
    script = f"""{search}
repos={shlex.quote(" ".join(pristine.repos))}
ids=$(command -v git >/dev/null && git hash-object --no-filters -- {paths})
for id in $ids; do echo "B $id"; done
for repo in $repos; do
  objects="$(cd "$repo" && cd "$({GIT} rev-parse --git-common-dir)" && pwd -P)/objects"
  [ -d "$objects" ] && [ -z "$(find "$objects" -newerct @{pristine.since:.9f} -print -quit)" ] \\
    || echo "X $repo"
done 2>/dev/null
{git_lookup("$ids")}
"""
    text = await run_script(sandbox, task, script)
    lines = text.splitlines()
    ids = [line[2:] for line in lines if line.startswith("B ")]
    if len(ids) == len(solved.outputs):
        solved.blob_ids = dict(zip(ids, sorted(solved.outputs), strict=True))
    changed = [line[2:] for line in lines if line.startswith("X ")]
    ctimes = {}
    for line in lines:
        if line.startswith("C "):
            ctime, _, path = line[2:].partition(" ")
            ctimes[path] = float(ctime)
    found = parse_hashes(
        "\n".join(line for line in lines if line[:2] not in ("C ", "B ", "X ", "M "))
    )
    unknown = _unknown(pristine, outputs, ctimes)
    if unknown or changed:
        why = f"{unknown[0]} changed" if unknown else f"the object store of {changed[0]} changed"
        log.debug("task %s: the oracle's look inside the image cannot decide: %s", task.id, why)
        look.undecided = solved
        return
    git = pristine.no_git if not solved.blob_ids else git_findings(text, solved.blob_ids)
    look.findings = [
        *solved.findings,
        *pristine.hidden,
        *hit_findings(_pristine_hashes(found, ctimes, pristine), outputs),
        *git,
    ]


def _solve_exit(trajectory: Trajectory) -> int | None:
    for turn in trajectory.turns:
        for result in turn.tool_results:
            if ORACLE_COMMAND in result.arguments:
                return result.exit_code
    return None


def _unknown(pristine: _Pristine, outputs: Wanted, ctimes: dict[str, float]) -> list[str]:
    """The files the image held at an output's size, out of the first snapshot's reach, that
    the solution changed, moved or removed: their pristine content is unknown."""
    sizes = {size for _, _, size in outputs.values()}
    workdir = PurePosixPath(pristine.before.workdir)
    return sorted(
        path
        for path, size in pristine.files.items()
        if size in sizes
        and not _in_snapshot(PurePosixPath(path), workdir)
        and not any(part in CACHES for part in PurePosixPath(path).parts)
        and ctimes.get(path, float("inf")) > pristine.since
    )


def _in_snapshot(path: PurePosixPath, workdir: PurePosixPath) -> bool:
    """Whether the snapshot of ``workdir`` reaches ``path`` (not under a pruned directory)."""
    if not path.is_relative_to(workdir):
        return False
    return not any(part in PRUNED_NAMES for part in path.relative_to(workdir).parts)


def _pristine_hashes(
    now: dict[str, str], ctimes: dict[str, float], pristine: _Pristine
) -> dict[str, str]:
    """What the image held: the first snapshot where it reaches, elsewhere the files unchanged
    since the pristine look (as ``_unknown`` found, no other changed one was in the image)."""
    workdir = PurePosixPath(pristine.before.workdir)
    elsewhere = {
        path: digest
        for path, digest in now.items()
        if not _in_snapshot(PurePosixPath(path), workdir)
        and ctimes.get(path, float("inf")) <= pristine.since
    }
    return {**elsewhere, **pristine.before.hashes}
