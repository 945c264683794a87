"""``envfarm check`` over a corpus of public Harbor-format tasks; the fault of each first blocker.

The corpus is a list of ``owner/repo[:path]`` names (``bench/corpus.txt``): every task directory
(one holding ``task.toml``; a task is not searched further, hidden directories are skipped) under
``ROOT/owner/repo/path`` is checked. Nothing is fetched here: the repositories are brought under
``--root`` beforehand (``ROOT/owner/repo`` holding the repository's tree), and a listed entry
missing there is reported as not fetched.

Each task gets ``envfarm check TASK --runs 1`` (it builds the image, runs the oracle and nop and
prints a verdict), one task at a time, under ``--timeout-s`` (SIGINT first, so that envfarm
removes its sandboxes, then SIGKILL), in round-robin order over the repositories so that a run
cut short by ``--budget-s`` has seen every one. Each result is appended to ``--out`` as one
JSON line as soon as it is known; a task already there is skipped, so a run resumes where it
stopped (delete its line to check a task again).

The first blocker of each task is classified from the evidence in ``check``'s output (its exit
status, its problem/infra/bad-input lines, the verifier's and the build's output), never
guessed:

- ``ok``: the task is sound (exit 0).
- ``envfarm``: envfarm's fault: a Harbor feature it refuses (``not supported by envfarm``), or
  one of its known faults: the ``.dockerignore`` entry it adds to the build context, ``/tests``
  busy in the verifier, a FROM read out of a heredoc, a substitute base whose packages differ
  from the image the task names.
- ``task``: the task's own fault: nop reaching the maximum, a missing COPY source, a required
  file missing, a reference solution that scores below the maximum on the task's own graded
  scale while every test passes.
- ``offline``: needs a host these machines cannot reach (name resolution or connection
  failures, with the host when the output names it), a base image no offline source
  provides (a substitute standing in for a Python version no reachable archive has), or
  services the task reaches with the host's API keys or tokens, which no sandbox is given.
- ``refused``: documented refusals (mounting the host's Docker socket).
- ``unclassified``: none of the above matched; the reason is the message itself.

``check`` runs with this process's environment: set ``ENVFARM_UBUNTU_ARCHIVE`` for the
``python:3.12`` substitutes (docs/images.md). Prints a table and a summary line; the last line
is one JSON object with the counts. Usage:

  python bench/corpus.py --root DIR [--list bench/corpus.txt] [--only PATTERN]
                         [--timeout-s 1200] [--budget-s N] [--out results.jsonl]
  python bench/corpus.py --reclassify --out results.jsonl   # after a rule changed
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
DEFAULT_ROOT = Path("~/.cache/envfarm-bench/corpus").expanduser()
BLOCKERS = ("ok", "envfarm", "task", "offline", "refused", "unclassified")


@dataclass(frozen=True)
class Entry:
    """One line of the list: ``owner/repo`` and an optional path inside it."""

    repo: str
    path: str = ""

    @property
    def name(self) -> str:
        return f"{self.repo}:{self.path}" if self.path else self.repo

    def directory(self, root: Path) -> Path:
        return root / self.repo / self.path if self.path else root / self.repo


def read_list(path: Path) -> list[Entry]:
    entries = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        repo, _, sub = line.partition(":")
        if repo.count("/") != 1 or ".." in sub.split("/"):
            raise SystemExit(f"{path}:{number}: not owner/repo[:path]: {raw!r}")
        entries.append(Entry(repo, sub.strip("/")))
    return entries


def task_dirs(directory: Path) -> Iterator[Path]:
    """Task directories at or below ``directory``, as envfarm finds them."""
    if (directory / "task.toml").is_file():
        yield directory
        return
    for child in sorted(directory.iterdir()):
        if child.is_dir() and not child.is_symlink():
            if child.name.startswith(".") or child.name == "__pycache__":
                continue
            yield from task_dirs(child)


def round_robin(groups: list[list[Path]]) -> list[Path]:
    """One task of each repository in turn, so that any prefix of the order is diverse."""
    order: list[Path] = []
    seen: set[Path] = set()
    for i in range(max((len(g) for g in groups), default=0)):
        for group in groups:
            if i < len(group) and group[i] not in seen:
                seen.add(group[i])
                order.append(group[i])
    return order


# --- reading check's output -----------------------------------------------------------------

_DETAIL = re.compile(r"^  (problem|infra  |warning|info   ) (.*)$")
_BAD_INPUT = re.compile(r"^bad input (.*)$")


@dataclass
class Output:
    """What ``envfarm check`` printed, split into the parts the classification reads."""

    problems: list[str] = field(default_factory=list)
    infra: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    bad_inputs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    verifier: list[str] = field(default_factory=list)
    build: list[str] = field(default_factory=list)
    """The image build's error, as the progress line printed it."""
    sound: bool = False


def parse(text: str) -> Output:
    out = Output()
    current: list[str] | None = None  # the message continuation lines belong to
    for line in text.splitlines():
        if line[:1] in "┏┃┡│└╇┳┻━":
            current = None
            continue
        if line.startswith("    | "):
            out.verifier.append(line[6:])
            current = None
            continue
        if m := _DETAIL.match(line):
            kind, message = m.group(1).strip(), m.group(2)
            target = {
                "problem": out.problems,
                "infra": out.infra,
                "warning": out.warnings,
                "info": None,
            }[kind]
            if target is not None:
                target.append(message)
            current = target
            continue
        if m := _BAD_INPUT.match(line):
            out.bad_inputs.append(m.group(1))
            current = out.bad_inputs
            continue
        if line.startswith("  also ") and out.bad_inputs:
            out.bad_inputs[-1] += "\n" + line[7:]
            continue
        if m := re.match(r"^image for \S+ failed: (.*)$", line):
            out.build.append(m.group(1))
            current = out.build
            continue
        if line.startswith("error: ") and current is None:  # else a quoted log's line
            out.errors.append(line[7:])
            current = out.errors
            continue
        if re.match(r"^\d+ of \d+ tasks? sound$", line):
            out.sound = line.startswith("1 of 1 ")
            current = None
            continue
        if line.startswith(("  oracle ep-", "  nop ep-", "  verifier output", "artifacts under")):
            current = None
        elif current is not None and line.strip():
            current[-1] += "\n" + line.strip()
    return out


# --- the classification -----------------------------------------------------------------------

_HOST_FAILURES = [
    re.compile(r"Could not resolve host:? '?([\w.-]+)"),
    re.compile(r"Failed to connect to ([\w.-]+)"),
    re.compile(r"unable to access 'https?://([\w.-]+)"),
    re.compile(r"Could not connect to ([\w.-]+)"),
    re.compile(r"Failed to establish a new connection.*?host='([\w.-]+)'"),
    re.compile(r"Could not transfer artifact .* from/to \S+ \((https?://[\w.-]+)"),
    re.compile(r"dial tcp: lookup ([\w.-]+)"),
    re.compile(r"getaddrinfo ENOTFOUND ([\w.-]+)"),
    re.compile(r"unable to resolve host address '([\w.-]+)'"),
    re.compile(r"Resolving ([\w.-]+)[^\n]*failed"),
    re.compile(r"Temporary failure resolving '([\w.-]+)'"),
    re.compile(r"Failed to fetch:? '?https?://([\w.-]+)"),
    re.compile(r"error sending request for url \(https?://([\w.-]+)"),
]
_NET_FAILURES = re.compile(
    r"Temporary failure in name resolution|Name or service not known|Network is unreachable|"
    r"No address associated with hostname|nodename nor servname|"
    r"failed to lookup address information|dns error"
)
_MISSING_COPY = re.compile(
    r"COPY failed|ADD failed|failed to compute cache key|"
    r"COPY [^\n]*: (?:no such file or directory|not found)|no source files were specified",
    re.IGNORECASE,
)
_NOT_PULLABLE = re.compile(r"base image '([^']+)' is neither a local image nor pullable")
_SUBSTITUTE = re.compile(r"envfarm supplies ([^;:\n]+) instead|substitut", re.IGNORECASE)
# Build or grading failures that come from a substitute's packages differing from the named
# image's (a Debian-owned Python package pip cannot replace, an Ubuntu-only file, a wheel
# missing for the substitute's Python).
_SUBSTITUTE_MISMATCH = re.compile(
    r"externally-managed-environment|Cannot uninstall '?[\w.-]+'?.*(?:RECORD|distutils)|"
    r"ubuntu\.sources|Unable to locate package|has no installation candidate|"
    r"Failed building wheel|Failed to build installable wheels|"
    r"requires a different Python|Requires-Python|"
    r"/sdists-v\d+/|metadata-generation-failed|Failed to build `|"
    r"Building wheel for [\w.-]+ .*error",
)
LINT_MARKER = "\n--- envfarm check --no-run ---\n"
_SUBSTITUTIONS = re.compile(r"^substitutions: (.+)$", re.MULTILINE)
# A substitute standing in for a version no offline source provides (docs/images.md).
_NO_SOURCE = re.compile(r"no (?:Debian|Ubuntu) release has this|no offline source", re.IGNORECASE)
_ORACLE_FAILS = re.compile(r"^oracle fails\b")
_CREDENTIAL = re.compile(r"\$\{(\w*(?:API_KEY|TOKEN|SECRET)\w*)(?::-[^}]*)?\}")


def _host_credentials(task: Path) -> list[str]:
    """The host variables holding credentials that the task's ``task.toml`` asks for
    (``${ANTHROPIC_API_KEY}``, say): services of its own that a sandbox here never reaches."""
    path = task / "task.toml"
    text = path.read_text(errors="replace") if path.is_file() else ""
    return sorted(set(_CREDENTIAL.findall(text)))


# A request for a package index's ``/simple/NAME/`` page (PyPI's API, whatever the host): the
# host's PyPI mirror is what envfarm's images use, through pip's configuration, so such a request
# failing in a build or at grading is a tool (uv) that envfarm did not point at that mirror.
_INDEX_REQUEST = re.compile(r"https?://([\w.-]+)/simple/[\w.-]+/?")
_NOT_FOUND_COMMAND = re.compile(r"(?:line \d+: )?([\w.+-]+): (?:command )?not found")


@dataclass(frozen=True)
class Verdict:
    blocker: str
    reason: str


def first_line(message: str, limit: int = 240) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _host(text: str) -> str | None:
    for pattern in _HOST_FAILURES:
        if m := pattern.search(text):
            return m.group(1).removeprefix("https://").removeprefix("http://").rstrip(".")
    return None


def _from_names(task: Path) -> set[str] | None:
    """The base names of the Dockerfile's FROM lines outside heredoc bodies; None without one."""
    dockerfile = task / "environment" / "Dockerfile"
    if not dockerfile.is_file():
        return None
    names: set[str] = set()
    ending: str | None = None
    for line in dockerfile.read_text(errors="replace").splitlines():
        if ending is not None:
            if line.strip() == ending:
                ending = None
            continue
        if m := re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line):
            ending = m.group(1)
        words = line.split()
        if len(words) >= 2 and words[0].upper() == "FROM":
            rest = [w for w in words[1:] if not w.startswith("--")]
            if rest:
                names.add(rest[0])
    return names


def _copies_many_to_dot(task: Path, message: str) -> bool:
    """Whether the Dockerfile the build message names has a COPY of several sources to ``.``
    (a directory to BuildKit, refused by the classic builder)."""
    named = re.search(r"\((environment/[^)]*Dockerfile)\)", message)
    dockerfile = task / (named.group(1) if named else "environment/Dockerfile")
    if not dockerfile.is_file():
        return False
    for line in dockerfile.read_text(errors="replace").splitlines():
        words = [w for w in line.split() if not w.startswith("--")]
        if len(words) >= 4 and words[0].upper() in ("COPY", "ADD") and words[-1] in (".", "./."):
            return True
    return False


def classify(task: Path, rc: int | None, text: str, timeout_s: float) -> Verdict:
    """The fault of the first blocker, from ``check``'s exit status and output; the task's own
    path reads ``TASK`` in the reason."""
    verdict = _classify(task, rc, text, timeout_s)
    return Verdict(verdict.blocker, verdict.reason.replace(str(task), "TASK"))


def _classify(task: Path, rc: int | None, text: str, timeout_s: float) -> Verdict:
    if rc is None:
        return Verdict("unclassified", f"timed out after {timeout_s:.0f} s")
    text, _, lint = text.partition(LINT_MARKER)
    out = parse(text)
    if rc == 0 and out.sound:
        return Verdict("ok", "sound")
    out.warnings += parse(lint).warnings
    messages = out.bad_inputs + out.errors + out.problems + out.infra
    if not messages:
        tail = " | ".join(text.strip().splitlines()[-3:])
        return Verdict("unclassified", f"exit {rc} without a problem line: {tail[:200]}")
    first = messages[0]
    evidence = "\n".join([first, *out.build, *out.verifier])
    problems = "\n".join(out.problems)
    substituted = [w for w in out.warnings if _SUBSTITUTE.search(w)]
    # a failed build lists its substitutions on a line of its own, not as warnings
    substituted += [s for s in _SUBSTITUTIONS.findall(text) if "instead" in s]
    evidence += "\n" + "\n".join(_SUBSTITUTIONS.findall(text))

    if re.search(r"docker\.sock|Docker socket", first, re.IGNORECASE):
        return Verdict("refused", first_line(first))
    if "envfarm never passes the host's environment" in first:
        unset = re.search(r"'(\w+)' has no value", first)
        variable = unset.group(1) if unset else "a variable"
        return Verdict("refused", f"the compose file passes the host's {variable} through")
    if "not supported by envfarm" in first:
        return Verdict("envfarm", "refused: " + first_line(first.split(": ", 1)[-1]))
    if "protected file changed: .dockerignore" in evidence:
        return Verdict("envfarm", "the build context gets envfarm's .dockerignore line")
    if re.search(r"Device or resource busy: '/(tests|solution)", evidence):
        return Verdict("envfarm", "/tests is a mount point in the verifier (EBUSY)")
    if m := _NOT_PULLABLE.search(first):
        named = _from_names(task)
        if named is not None and m.group(1) not in named:
            return Verdict("envfarm", f"FROM read out of a heredoc body: base image {m.group(1)!r}")
        return Verdict(
            "offline", f"base image {m.group(1)}: not pullable here, no offline substitute"
        )
    if "the destination must be a directory and end with a /" in evidence:
        if _copies_many_to_dot(task, first):
            return Verdict(
                "envfarm",
                "the classic builder refuses `COPY a b .`, which BuildKit (Harbor's) builds",
            )
        return Verdict("task", "a COPY of several files to a destination that is no directory")
    if first.startswith("nop passes"):
        return Verdict(
            "task", "nop passes: the tests do not tell a solved task from an untouched one"
        )
    if _MISSING_COPY.search(first):
        return Verdict("task", "a COPY source is missing: " + first_line(first))
    if "no solution/solve.sh" in first:
        return Verdict("task", "no solution/solve.sh: the oracle cannot show it solvable")
    if m := re.search(r"missing: (instruction\.md|tests/test\.sh)", first):
        return Verdict("task", f"required file missing: {m.group(1)}")
    if m := re.search(r"verifier had no network \(the task sets no-network\)[^\n]*", problems):
        return Verdict("task", "test.sh downloads at grading, the task sets no-network")
    host = _host(evidence)
    sidecar = re.search(
        r"service '([\w.-]+)' (?:stopped before it was healthy|never became healthy)", first
    )
    if sidecar and (host is not None or _NET_FAILURES.search(first)):
        return Verdict(
            "envfarm",
            f"sidecar {sidecar.group(1)} has no network: its start needs {host or 'a host'}",
        )
    if host is not None and (m := _INDEX_REQUEST.search(evidence)) and m.group(1) == host:
        where = "the build" if out.build or not out.verifier else "grading"
        return Verdict(
            "envfarm",
            f"{where} asks the package index at {host} directly (uv?): envfarm's images "
            "point pip, not this tool, at the host's mirror",
        )
    if host is not None:
        where = "build" if "build" in first.lower() else "the oracle or grading"
        return Verdict("offline", f"{where} needs {host}, unreachable here")
    if _NET_FAILURES.search(evidence):
        return Verdict("offline", "a name lookup or connection failed: " + first_line(first))
    if "exit code 127" in first and (m := _NOT_FOUND_COMMAND.search(evidence)) and not substituted:
        return Verdict("task", f"test.sh runs {m.group(1)}, which the task's image lacks")
    if substituted and (m := _SUBSTITUTE_MISMATCH.search(evidence)):
        used = [w for w in substituted if "instead" in w] or substituted
        what = re.sub(r"^.*?(?:-> recipe [\w.-]+: |^build: (?:service \S+ )?)", "", used[0])
        what = re.sub(r" by envfarm's recipe ", " -> ", what.split("); ")[0])
        failed = m.group(0)
        if failed.startswith("/sdists-") or "wheel" in failed or "metadata" in failed:
            failed = "a pinned package has no wheel there and its source build fails"
        if _NO_SOURCE.search(used[0]):  # no offline source has the named image's version
            shown = first_line(what, 110)
            return Verdict("offline", f"no offline source has the image ({shown}): {failed}")
        return Verdict("envfarm", f"substitute differs ({first_line(what, 110)}): {failed}")
    partial = re.match(r"oracle fails: the oracle reaches (0\.\d+), not the maximum 1$", first)
    verifier = "\n".join(out.verifier)
    if partial and re.search(r"\d+ passed", verifier) and not re.search(r"\d+ failed", verifier):
        return Verdict(
            "task",
            f"its reference solution scores {partial.group(1)} on the task's own graded scale "
            "(every test passes)",
        )
    if (
        _ORACLE_FAILS.search(first)
        and (names := _host_credentials(task))
        and _NET_FAILURES.search(evidence) is None
    ):
        return Verdict(
            "offline",
            f"the oracle needs services the task reaches with the host's {', '.join(names)} "
            "(never passed to a sandbox, and the services are unreachable here)",
        )
    return Verdict("unclassified", first_line(first))


# --- running ------------------------------------------------------------------------------


def run_check(task: Path, timeout_s: float, env: dict[str, str]) -> tuple[int | None, str, float]:
    """``envfarm check TASK --runs 1``: exit status (None: timed out), output, seconds."""
    artifacts = Path(tempfile.mkdtemp(prefix="envfarm-corpus-"))
    command = [sys.executable, "-m", "envfarm", "check", str(task), "--runs", "1"]
    command += ["--artifacts", str(artifacts)]
    started = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        rc: int | None
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            rc = None
            os.killpg(proc.pid, signal.SIGINT)  # envfarm removes its sandboxes on Ctrl-C
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.seek(0)
        text = log.read()
    shutil.rmtree(artifacts, ignore_errors=True)
    return rc, with_lint(task, rc, text, env), time.monotonic() - started


def with_lint(task: Path, rc: int | None, text: str, env: dict[str, str]) -> str:
    """``text`` and, after a failed build, ``envfarm check --no-run``'s output: a failed build
    prints no substitution, and the lint resolves the bases as the build did."""
    if rc != 1 or "image for " not in text or LINT_MARKER in text:
        return text
    lint = subprocess.run(
        [sys.executable, "-m", "envfarm", "check", str(task), "--no-run"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    return text + LINT_MARKER + lint.stdout + lint.stderr


def _kept_output(text: str, limit: int = 400) -> str:
    """``check``'s output for the record, without its table, at most ``limit`` lines (the
    first and the last ones) and the lint's after it: what ``--reclassify`` reads again."""
    text, marker, lint = text.partition(LINT_MARKER)
    lines = [line for line in text.splitlines() if line[:1] not in "┏┃┡│└╇┳┻━"]
    if len(lines) > limit:
        lines = [*lines[: limit // 4], "[...]", *lines[-(limit - limit // 4) :]]
    return "\n".join(lines) + marker + lint


def reclassify(path: Path, root: Path, timeout_s: float, env: dict[str, str]) -> None:
    """Classify every result of ``path`` again from its kept output (after a rule changed)."""
    records = list(load_results(path).values())
    for record in records:
        task = root / record["task"]
        record["output"] = with_lint(task, record["exit"], record.get("output", ""), env)
        verdict = classify(task, record["exit"], record["output"], timeout_s)
        record["blocker"], record["reason"] = verdict.blocker, verdict.reason
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def load_results(path: Path) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                results[record["task"]] = record
    return results


def _table(rows: list[dict[str, Any]]) -> str:
    width = max((len(r["task"]) for r in rows), default=4)
    lines = [f"{'task':<{width}}  {'blocker':<12}  {'s':>5}  reason"]
    for r in rows:
        seconds = f"{r['seconds']:.0f}"
        lines.append(f"{r['task']:<{width}}  {r['blocker']:<12}  {seconds:>5}  {r['reason']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    parser.add_argument("--list", type=Path, default=BENCH / "corpus.txt", dest="listing")
    parser.add_argument("--only", help="glob (or substring) over owner/repo/path of a task")
    parser.add_argument("--timeout-s", type=float, default=1200.0)
    parser.add_argument("--budget-s", type=float, default=None, help="start no task after this")
    parser.add_argument("--out", type=Path, default=Path("corpus-results.jsonl"))
    parser.add_argument(
        "--reclassify",
        action="store_true",
        help="run nothing: classify the results in --out again from their kept output",
    )
    args = parser.parse_args(argv)

    root = args.root.expanduser().resolve()
    env = {**os.environ, "COLUMNS": "400", "NO_COLOR": "1", "TERM": "dumb"}
    if args.reclassify:
        reclassify(args.out, root, args.timeout_s, env)
    entries = read_list(args.listing)
    by_repo: dict[str, list[Path]] = {}
    unfetched: list[str] = []
    for entry in entries:
        directory = entry.directory(root)
        if not directory.is_dir():
            unfetched.append(entry.name)
            continue
        by_repo.setdefault(entry.repo, []).extend(task_dirs(directory))
    tasks = round_robin(list(by_repo.values()))
    if args.only:
        pattern = args.only if any(c in args.only for c in "*?[") else f"*{args.only}*"
        tasks = [t for t in tasks if fnmatch.fnmatchcase(str(t.relative_to(root)), pattern)]

    results = load_results(args.out)
    started = time.monotonic()
    skipped_budget = 0
    for index, task in enumerate(tasks, 1):
        key = str(task.relative_to(root))
        if key in results or args.reclassify:
            continue
        if args.budget_s is not None and time.monotonic() - started >= args.budget_s:
            skipped_budget = sum(
                1 for t in tasks[index - 1 :] if str(t.relative_to(root)) not in results
            )
            break
        print(f"[{index}/{len(tasks)}] {key} ...", flush=True)
        rc, text, seconds = run_check(task, args.timeout_s, env)
        verdict = classify(task, rc, text, args.timeout_s)
        out = parse(text.partition(LINT_MARKER)[0])
        record = {
            "task": key,
            "blocker": verdict.blocker,
            "reason": verdict.reason,
            "exit": rc,
            "seconds": round(seconds, 1),
            "first": (out.bad_inputs + out.errors + out.problems + out.infra or [""])[0][:2000],
            "warnings": out.warnings[:10],
            "verifier_tail": out.verifier[-15:],
            "build_error": out.build[0][-3000:] if out.build else "",
            "checked_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        record["output"] = _kept_output(text)
        results[key] = record
        with args.out.open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"    {verdict.blocker}: {verdict.reason} ({seconds:.0f} s)", flush=True)

    keys = [str(t.relative_to(root)) for t in tasks]
    rows = [results[k] for k in keys if k in results]
    print(_table(rows))
    counts = Counter(r["blocker"] for r in rows)
    not_run = len(keys) - len(rows)
    shown = ", ".join(f"{b} {counts[b]}" for b in BLOCKERS if counts[b])
    print(
        f"{len(rows)} of {len(keys)} tasks checked ({shown}); {not_run} not run"
        + (f" ({skipped_budget} for the budget)" if skipped_budget else "")
        + (f"; not fetched: {', '.join(unfetched)}" if unfetched else "")
    )
    summary: dict[str, Any] = {b: counts[b] for b in BLOCKERS}
    summary |= {"checked": len(rows), "listed": len(keys), "not_run": not_run}
    summary["not_fetched"] = len(unfetched)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
