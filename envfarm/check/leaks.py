"""Looking inside a built task image for what the agent must never find there.

``envfarm check`` takes the look in the task's first oracle episode (``oracle_look``, with the
scripts and parsers here); when that cannot decide, or no episode took it, in two throwaway
sandboxes of the task's image, one after the other (``inspect_image``, ``search_pristine``):

* **solved**: snapshot the working directory (path, size, sha256), run ``solution/solve.sh`` as
  the oracle would, snapshot again. The files the solution created or changed are its
  *outputs*; their git blob ids are computed there.
* **pristine**: search the whole filesystem for files identical (size, then sha256) to a hidden
  test or solution file, or to a solution output: the grader or the answer ships in the image.
  Then ask every git repository in or above the working directory whether it already holds an
  output's blob (in any commit, stash, or as a dangling object): the answer can be mined from
  history. The pristine sandbox is the state the agent starts from, so what the solution itself
  committed or wrote never counts.

Files under ``MIN_COMPARED_BYTES`` are not compared: tiny files match by chance. Findings use the
rules ``tests-in-image``, ``solution-in-image`` and ``solution-in-git``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from envfarm.errors import SandboxError
from envfarm.plan.planner import plan_episode
from envfarm.sandbox.base import PreparedImage, Sandbox, SandboxBackend
from envfarm.sandbox.files import upload_dir
from envfarm.spec.findings import Finding, Severity
from envfarm.spec.hidden_files import (
    MIN_COMPARED_BYTES,
    hidden_file_hashes,
    is_test_code,
)
from envfarm.spec.task import Task

SOLUTION_DIR = "/solution"
MAX_FILES = 20_000
MAX_SIZES = 400
MAX_HITS_PER_FILE = 3
EXEC_TIMEOUT_S = 300.0
DEFAULT_SOLVE_TIMEOUT_S = 600.0
PRUNED_NAMES = (".git", "__pycache__", "node_modules", ".pytest_cache")
"""Directories the snapshots of the working directory leave out."""
_PRUNED = " -o ".join(f"-name {name}" for name in PRUNED_NAMES)
GIT = "git -c safe.directory='*'"
T = TypeVar("T")

SNAPSHOT = f"""
echo "W $(pwd)"
find . -xdev \\( {_PRUNED} \\) -prune -o -type f -size -20M -print0 2>/dev/null \\
  | head -z -n {MAX_FILES} \\
  | xargs -0 -r sh -c 'stat -c "S %s %n" "$@"; sha256sum "$@" | sed "s/^/H /"' snapshot
"""
"""The working directory's files (a line of size, one of sha256 each), writing nothing."""

REPOS = f"""
repos=$({{ {GIT} rev-parse --show-toplevel 2>/dev/null
  find . -xdev -maxdepth 4 -name .git -prune -printf '%h\\n' 2>/dev/null; }} \\
  | while read -r dir; do (cd "$dir" && pwd -P); done | sort -u)
"""


@dataclass
class Snapshot:
    workdir: str = "/"
    sizes: dict[str, int] = field(default_factory=dict)
    hashes: dict[str, str] = field(default_factory=dict)


@dataclass
class Solved:
    outputs: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Absolute path -> (size, sha256) of each file the solution created or changed."""
    blob_ids: dict[str, str] = field(default_factory=dict)
    """Git blob id -> the output path it is the content of."""
    findings: list[Finding] = field(default_factory=list)


def _finding(rule: str, message: str, severity: Severity = "error") -> Finding:
    return Finding(severity=severity, rule=rule, message=message)


async def inspect_image(
    backend: SandboxBackend, task: Task, image: PreparedImage, *, run_id: str
) -> list[Finding]:
    """What the task's image holds that it must not; raises SandboxError on infrastructure."""
    solved = await _in_sandbox(backend, task, image, run_id, lambda box: _solve(box, task))
    return await search_pristine(backend, task, image, solved, run_id=run_id)


async def search_pristine(
    backend: SandboxBackend, task: Task, image: PreparedImage, solved: Solved, *, run_id: str
) -> list[Finding]:
    """``solved``'s findings and what a pristine sandbox holds of the hidden files and outputs."""
    found = await _in_sandbox(backend, task, image, run_id, lambda box: _search(box, task, solved))
    return [*solved.findings, *found]


async def _in_sandbox(
    backend: SandboxBackend,
    task: Task,
    image: PreparedImage,
    run_id: str,
    body: Callable[[Sandbox], Awaitable[T]],
) -> T:
    # a throwaway sandbox of the task's own plan, on the engine's default runtime
    spec = plan_episode(task, facts=await backend.facts()).sandbox
    sandbox = backend.create(spec, image, run_id=run_id)
    try:
        await sandbox.start()
        return await body(sandbox)
    finally:
        await sandbox.stop()


async def run_script(sandbox: Sandbox, task: Task, script: str) -> str:
    result = await sandbox.exec(
        script, timeout=EXEC_TIMEOUT_S, workdir=task.config.environment.workdir, user="root"
    )
    if result.exit_code is None:
        raise SandboxError(f"inspecting the image timed out after {EXEC_TIMEOUT_S:g}s")
    return result.stdout


def parse_snapshot(text: str) -> Snapshot:
    snapshot = Snapshot()
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "W":
            snapshot.workdir = rest
        elif kind == "S":
            size, _, name = rest.partition(" ")
            if size.isdigit():
                snapshot.sizes[_absolute(snapshot.workdir, name)] = int(size)
        elif kind == "H" and not rest.startswith("\\"):
            digest, _, name = rest.partition("  ")
            snapshot.hashes[_absolute(snapshot.workdir, name)] = digest
    return snapshot


def _absolute(workdir: str, name: str) -> str:
    return str(Path(workdir) / name.removeprefix("./")) if not name.startswith("/") else name


async def _solve(sandbox: Sandbox, task: Task) -> Solved:
    solved = Solved()
    if task.solution_dir is None:
        return solved
    before = parse_snapshot(await run_script(sandbox, task, SNAPSHOT))
    await upload_dir(sandbox, task.solution_dir, SOLUTION_DIR)
    result = await sandbox.exec(
        f"bash {SOLUTION_DIR}/solve.sh",
        timeout=task.config.agent.timeout_sec or DEFAULT_SOLVE_TIMEOUT_S,
        workdir=task.config.environment.workdir,
        env=dict(task.config.solution.env),
        user=task.config.agent.user,
    )
    solved.findings += solve_failed(result.exit_code)
    after = parse_snapshot(await run_script(sandbox, task, SNAPSHOT))
    solved.outputs = outputs_between(before, after)
    if solved.outputs:
        solved.blob_ids = await _blob_ids(sandbox, task, sorted(solved.outputs))
    return solved


def solve_failed(exit_code: int | None) -> list[Finding]:
    """The warning when ``solve.sh`` failed (None: it did not finish) where its outputs were
    noted."""
    if exit_code == 0:
        return []
    how = f"exited {exit_code}" if exit_code is not None else "did not finish"
    return [
        _finding(
            "solution-in-image",
            f"solution/solve.sh {how} where the inspection noted its outputs, so they may be "
            "incomplete for the leak search",
            "warning",
        )
    ]


def outputs_between(before: Snapshot, after: Snapshot) -> dict[str, tuple[int, str]]:
    """The files of the working directory the solution created or changed, but its own."""
    outputs = {}
    for path, digest in after.hashes.items():
        size = after.sizes.get(path, 0)
        changed = before.hashes.get(path) != digest
        if changed and size >= MIN_COMPARED_BYTES and not path.startswith(SOLUTION_DIR + "/"):
            outputs[path] = (size, digest)
    return outputs


async def _blob_ids(sandbox: Sandbox, task: Task, paths: list[str]) -> dict[str, str]:
    quoted = " ".join(shlex.quote(p) for p in paths)
    text = await run_script(
        sandbox, task, f"command -v git >/dev/null && git hash-object --no-filters -- {quoted}"
    )
    ids = text.split()
    return dict(zip(ids, paths, strict=False)) if len(ids) == len(paths) else {}


async def _search(sandbox: Sandbox, task: Task, solved: Solved) -> list[Finding]:
    return [
        *await _identical_files(sandbox, task, solved),
        *await _git_history(sandbox, task, solved),
    ]


async def _identical_files(sandbox: Sandbox, task: Task, solved: Solved) -> list[Finding]:
    wanted = {**wanted_outputs(solved), **wanted_hidden(task)}
    if not wanted:
        return []
    text = await run_script(
        sandbox, task, find_by_size(wanted, "-print0 2>/dev/null | xargs -0 -r sha256sum")
    )
    return hit_findings(parse_hashes(text), wanted)


Wanted = dict[str, tuple[str, str, int]]
"""sha256 -> (rule, what the content is, its size) of the contents searched for."""


def wanted_hidden(task: Task) -> Wanted:
    """The hidden test logic and solve scripts whose presence in the image is a leak."""
    wanted: Wanted = {}
    for digest, (path, serious) in hidden_file_hashes(task).items():
        if serious:
            relative = path.relative_to(task.root) if path.is_relative_to(task.root) else path
            rule = "tests-in-image" if is_test_code(path) else "solution-in-image"
            wanted[digest] = (rule, f"identical to the hidden {relative}", path.stat().st_size)
    return wanted


def wanted_outputs(solved: Solved) -> Wanted:
    return {
        digest: ("solution-in-image", f"identical to what solution/solve.sh writes to {path}", size)
        for path, (size, digest) in solved.outputs.items()
    }


def find_by_size(
    wanted: Wanted, action: str, pruned: tuple[str, ...] = (), listing: str = ""
) -> str:
    """A ``find`` of the whole filesystem for the files of ``wanted``'s sizes, then ``action``;
    ``listing`` (an action that prints) runs first for every regular file, and alone when
    nothing is wanted."""
    sizes = sorted({size for _, _, size in wanted.values()})[:MAX_SIZES]
    size_test = " -o ".join(f"-size {size}c" for size in sizes)
    prune = " -o ".join(f"-path {shlex.quote(p)}" for p in ("/proc", "/sys", "/dev", *pruned))
    walk = f"find / -xdev \\( {prune} \\) -prune -o -type f"
    if not sizes:
        return f"{walk} {listing}"
    listed = f"\\( {listing} -o -true \\) " if listing else ""
    return f"{walk} {listed}\\( {size_test} \\) {action}"


_SHA256_LINE = re.compile(r"([0-9a-f]{64})  (.+)")


def parse_hashes(text: str, prefix: str = "") -> dict[str, str]:
    """``sha256sum``'s lines (after ``prefix``; escaped names left out): path -> digest."""
    hashes: dict[str, str] = {}
    for line in text.splitlines():
        found = _SHA256_LINE.fullmatch(line[len(prefix) :]) if line.startswith(prefix) else None
        if found is not None:
            hashes[found[2]] = found[1]
    return hashes


def hit_findings(hashes: dict[str, str], wanted: Wanted) -> list[Finding]:
    """A finding per wanted content that some of ``hashes``' paths hold."""
    hits: dict[str, list[str]] = {}
    for path, digest in hashes.items():
        if digest in wanted:
            hits.setdefault(digest, []).append(path)
    found = []
    for digest, paths in sorted(hits.items()):
        rule, what, _ = wanted[digest]
        shown = ", ".join(sorted(paths)[:MAX_HITS_PER_FILE])
        more = (
            f" (and {len(paths) - MAX_HITS_PER_FILE} more)"
            if len(paths) > MAX_HITS_PER_FILE
            else ""
        )
        found.append(_finding(rule, f"the image holds {shown}{more}, {what}"))
    return found


async def _git_history(sandbox: Sandbox, task: Task, solved: Solved) -> list[Finding]:
    if not solved.blob_ids:
        return await _git_unreadable(sandbox, task)
    text = await run_script(sandbox, task, REPOS + git_lookup(" ".join(sorted(solved.blob_ids))))
    return git_findings(text, solved.blob_ids)


def git_lookup(ids: str) -> str:
    """For each of ``$repos``, an ``M id repo [commit]`` line per blob of ``ids`` (words of
    the shell) it holds."""
    return f"""
for repo in $repos; do
  for id in {ids}; do
    if {GIT} -C "$repo" cat-file -e "$id" 2>/dev/null; then
      echo "M $id $repo $({GIT} -C "$repo" log --all --format='%h %s' \\
          --find-object="$id" 2>/dev/null | tail -n 1)"
    fi
  done
done
"""


def git_findings(text: str, blob_ids: dict[str, str]) -> list[Finding]:
    found = []
    for line in text.splitlines():
        parts = line.split(" ", 3)
        if len(parts) < 3 or parts[0] != "M" or parts[1] not in blob_ids:
            continue
        where = f"commit {parts[3]}" if len(parts) == 4 and parts[3] else "an unreachable object"
        found.append(
            _finding(
                "solution-in-git",
                f"what solution/solve.sh writes to {blob_ids[parts[1]]} is already in the "
                f"git repository {parts[2]} ({where}): the agent can recover the answer from "
                "its history",
            )
        )
    return found


NO_GIT = '[ -n "$repos" ] && ! command -v git >/dev/null && echo NOGIT; true'
"""After ``REPOS``: ``NOGIT`` when a repository is there but no git to read it."""


async def _git_unreadable(sandbox: Sandbox, task: Task) -> list[Finding]:
    return git_unreadable(await run_script(sandbox, task, REPOS + NO_GIT))


def git_unreadable(text: str) -> list[Finding]:
    """A repository in an image without git cannot be checked: say so."""
    if "NOGIT" not in text:
        return []
    return [
        _finding(
            "solution-in-git",
            "the working directory holds a git repository but the image has no git, so its "
            "history could not be searched for the solution",
            "warning",
        )
    ]
