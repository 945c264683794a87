"""What a rubric judge is shown of an episode: the workspace changes and the tool calls.

The changes are computed inside the sandbox, against the moment the container was created (the
earliest time on the files Docker writes into it then; PID 1's start time as a fallback). When
the workdir is a git repository with a commit from before then (told by its object's ctime, as
commit dates have second precision), it is ``git diff`` against the newest such commit plus the
untracked files (commits the agent made are part of its changes);
otherwise it is the full text of every file whose ctime is newer (ctime cannot be set back by
``touch``; deleted files are not visible without git). Caches (``.git``, ``__pycache__``,
``.pytest_cache``, ``node_modules``, ...) are skipped. Call it as the agent stops, before
grading restarts the container (a clean room in place: the start moves) or the verifier runs
(its own files are not the agent's). Both texts are size-capped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from envfarm.errors import GradingError
from envfarm.models.trajectory import Trajectory
from envfarm.sandbox.base import Sandbox

_DIFF_SCRIPT = r"""
set -u
if ! cd -- "$EF_WORKDIR" 2>/dev/null; then
  printf '(the workdir %s does not exist)\n' "$EF_WORKDIR"; exit 0
fi
boot=$(awk '/^btime/ {print $2}' /proc/stat)
ticks=$(sed 's/.*) //' /proc/1/stat | awk '{print $20}')
hz=$(getconf CLK_TCK 2>/dev/null || echo 100)
since=$((boot + ticks / hz))
# Docker writes /etc/hostname, /etc/hosts and /etc/resolv.conf when it creates the container:
# the earliest of their times dates the start to the nanosecond. PID 1's start time is only a
# fallback: it derives from the boot time, which drifts with the clock. Touching these files
# moves their ctime later, so all three must be touched to hide anything, and only from the
# judge (the tests grade regardless); setting a time in the past only shows more.
stamp=$(stat -c '%.9Y %.9Z' /etc/hostname /etc/hosts /etc/resolv.conf 2>/dev/null \
  | tr ' ' '\n' | sort -g | head -n 1)
since=${stamp:-$since}
g() { git -c 'safe.directory=*' -c core.quotepath=off "$@"; }
show() {
  [ -f "$1" ] || return 0
  size=$(stat -c %s -- "$1")
  printf '\n=== %s (%s bytes)\n' "$1" "$size"
  if [ "$(head -c 8192 -- "$1" | tr -d '\000' | wc -c)" != "$(head -c 8192 -- "$1" | wc -c)" ]; then
    echo '(binary file, not shown)'; return 0
  fi
  head -c "$EF_FILE_CAP" -- "$1"
  if [ "$size" -gt "$EF_FILE_CAP" ]; then
    printf '\n[... %s more bytes]\n' $((size - EF_FILE_CAP))
  fi
}
list() {
  n=0
  while IFS= read -r f; do
    n=$((n + 1))
    if [ "$n" -le "$EF_MAX_FILES" ]; then show "$f"; else printf '\n=== %s (not shown)\n' "$f"; fi
  done
  [ "$n" -gt 0 ] || echo '(none)'
}
base=""
# The base is the newest commit that existed before the container: commit dates have only
# second precision, so ask the object store instead (a loose object written since then is the
# agent's; a packed one shipped with the image).
if command -v git >/dev/null 2>&1 && gitdir=$(g rev-parse --git-dir 2>/dev/null); then
  for commit in $(g rev-list --max-count=500 HEAD 2>/dev/null); do
    object="$gitdir/objects/$(echo "$commit" | cut -c1-2)/$(echo "$commit" | cut -c3-)"
    if [ ! -e "$object" ] || [ -z "$(find "$object" -newerct "@$since" 2>/dev/null)" ]; then
      base=$commit
      break
    fi
  done
fi
if [ -n "$base" ]; then
  echo "git diff of the workdir against commit $base (its state when the sandbox started):"
  g diff --no-color --no-ext-diff "$base" -- . | head -c "$EF_DIFF_CAP"
  echo
  echo 'Untracked files:'
  g ls-files --others --exclude-standard -- . | list
else
  echo 'Files created or changed in the workdir since the sandbox started (full text):'
  find . \( -name .git -o -name __pycache__ -o -name .pytest_cache -o -name .mypy_cache \
    -o -name .ruff_cache -o -name node_modules -o -name .venv \) -prune \
    -o -type f ! -name '*.pyc' -newerct "@$since" -print | sort | list
fi
"""

_TRUNCATED = "\n[... {} more characters not shown]\n"


@dataclass(frozen=True)
class Evidence:
    diff: str
    transcript: str


def cap_text(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, saying how much was dropped."""
    if len(text) <= limit:
        return text
    return text[:limit] + _TRUNCATED.format(len(text) - limit)


def fenced(text: str, lang: str = "") -> str:
    """``text`` in a markdown code fence longer than any backtick run inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text}\n{fence}"


async def workspace_diff(sandbox: Sandbox, workdir: str | None, *, max_chars: int) -> str:
    """The changes made in ``workdir`` since the sandbox started, as size-capped text."""
    if workdir is None:
        probe = await sandbox.exec("pwd", timeout=30)
        workdir = probe.stdout.strip() or "/"
    if workdir == "/":
        return "(the task sets no workdir, so the workspace changes are not shown)"
    result = await sandbox.exec(
        _DIFF_SCRIPT,
        timeout=120,
        user="root",
        env={
            "EF_WORKDIR": workdir,
            "EF_FILE_CAP": str(max(1, max_chars // 2)),
            "EF_DIFF_CAP": str(max_chars + 1),
            "EF_MAX_FILES": "50",
        },
    )
    if result.timed_out or result.exit_code != 0:
        said = (result.stderr or result.stdout).strip()[-500:]
        raise GradingError(
            f"could not list the workspace changes for the judges (exit code "
            f"{result.exit_code}): {said or 'no output'}"
        )
    return cap_text(result.stdout.strip() or "(no changes)", max_chars)


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + " [...]"


def transcript_summary(trajectory: Trajectory, *, max_chars: int) -> str:
    """One entry per tool call (arguments, exit code, start of the output), head and tail kept
    when over ``max_chars``; then the agent's last message and why it stopped."""
    entries: list[str] = []
    for turn in trajectory.turns:
        for result in turn.tool_results:
            status = f"exit {result.exit_code}" if result.exit_code is not None else "no exit code"
            if result.error:
                status = f"rejected: {_one_line(result.error, 160)}"
            entry = (
                f"[turn {turn.index}] {result.name} {_one_line(result.arguments, 400)} -> {status}"
            )
            if result.output.strip() and not result.error:
                entry += "\n    " + _one_line(result.output, 240)
            entries.append(entry)
    kept = _head_and_tail(entries, max_chars)
    last = next(
        (
            m.get("content")
            for m in reversed(trajectory.messages)
            if m.get("role") == "assistant" and m.get("content")
        ),
        None,
    )
    if isinstance(last, str):
        kept.append("Agent's last message: " + _one_line(last, 600))
    if trajectory.outcome is not None:
        outcome = trajectory.outcome
        kept.append(f"The session ended: {outcome.stop_reason} after {outcome.turns} turns.")
    return "\n".join(kept) if kept else "(no tool calls)"


def _head_and_tail(entries: list[str], max_chars: int) -> list[str]:
    if sum(len(e) + 1 for e in entries) <= max_chars:
        return list(entries)
    head: list[str] = []
    used = 0
    for entry in entries:
        if used + len(entry) + 1 > max_chars // 2:
            break
        head.append(entry)
        used += len(entry) + 1
    tail: list[str] = []
    for entry in reversed(entries[len(head) :]):
        if used + len(entry) + 1 > max_chars:
            break
        tail.insert(0, entry)
        used += len(entry) + 1
    omitted = len(entries) - len(head) - len(tail)
    return [*head, f"[... {omitted} tool calls omitted ...]", *tail]


async def gather_evidence(
    sandbox: Sandbox,
    workdir: str | None,
    trajectory: Trajectory,
    *,
    diff_chars: int,
    transcript_chars: int,
) -> Evidence:
    diff = await workspace_diff(sandbox, workdir, max_chars=diff_chars)
    return Evidence(diff, transcript_summary(trajectory, max_chars=transcript_chars))
