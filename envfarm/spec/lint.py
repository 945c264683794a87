"""Static lint of a loaded task: what ``envfarm check`` can tell without building anything.

Loading already refused what makes a task unreadable (``load_task``); lint looks for what makes
a readable task unsound or gameable:

* ``test-script``: ``tests/test.sh`` is run as ``bash /tests/test.sh``, so it must be bash (no
  foreign shebang, no CRLF line ends, no NUL bytes) and pass ``bash -n``.
* ``tests-in-image`` (in ``spec.tests_in_image``): a Dockerfile ``COPY``/``ADD`` whose source
  reaches the tests or the solution, or a build-context file identical to hidden test logic
  or to the solve script: the agent would find the grader or the answer in its image.
* ``network``: the task asks for public network access (a warning), and ``test.sh`` looks like it
  downloads at grading time (a warning: grading then depends on the network).
* ``solution``: no ``solution/solve.sh``, so the oracle cannot show the task is solvable.
* ``max-reward``: ``[metadata].max_reward``, when set, must be a positive number (the reward the
  oracle must reach; 1.0 when unset).
* ``tolerated``: what loading let pass as Harbor does (unknown keys of ``task.toml``, a schema
  envfarm does not know, compose keys without effect here): warnings, never errors.
"""

from __future__ import annotations

import math
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from envfarm.spec.errors_fmt import issue_text
from envfarm.spec.findings import Finding, Severity, error, info, warning
from envfarm.spec.hidden_files import (
    MIN_COMPARED_BYTES,
    hidden_file_hashes,
    hidden_paths,
    is_test_code,
)
from envfarm.spec.network import VERIFIER_NETWORK_ENV
from envfarm.spec.task import Task
from envfarm.spec.tests_in_image import (
    dockerfile_copy_sources,
    lint_build_context,
    lint_dockerfile_copies,
)

__all__ = [
    "MIN_COMPARED_BYTES",
    "Finding",
    "Severity",
    "dockerfile_copy_sources",
    "grading_download",
    "hidden_file_hashes",
    "hidden_paths",
    "is_test_code",
    "lint_task",
    "lint_test_script",
    "max_reward",
]

DEFAULT_MAX_REWARD = 1.0
_SHELLS = frozenset({"bash", "sh", "dash"})
_DOWNLOADS = re.compile(
    r"^\s*[^#\n]*\b(pip3? (?:install|download)|uv (?:pip )?(?:install|sync|add)|"
    r"apt(?:-get)? install|npm (?:install|ci)|curl\s|wget\s|git clone)",
    re.MULTILINE,
)


def max_reward(task: Task) -> float:
    """The reward the oracle must reach: ``[metadata].max_reward``, else 1.0."""
    value = task.config.metadata.get("max_reward", DEFAULT_MAX_REWARD)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return DEFAULT_MAX_REWARD
    return float(value)


def lint_task(task: Task) -> list[Finding]:
    """Every static finding for ``task``: errors make it unsound, warnings are advice."""
    return [
        *(found for script in _graded_by(task) for found in lint_test_script(script)),
        *lint_solution(task),
        *lint_dockerfile_copies(task),
        *lint_build_context(task),
        *lint_network(task),
        *lint_max_reward(task),
        *lint_tolerated(task),
    ]


def lint_tolerated(task: Task) -> list[Finding]:
    return [warning("tolerated", issue_text(issue)) for issue in task.warnings]


def lint_test_script(path: Path) -> list[Finding]:
    rule = "test-script"
    try:
        data = path.read_bytes()
    except OSError as exc:
        return [error(rule, f"{path}: cannot read: {exc.strerror or exc}")]
    if b"\0" in data:
        return [error(rule, f"{path}: a binary file; it is run as `bash {path.name}`")]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return [error(rule, f"{path}: not UTF-8 text")]
    if not text.strip():
        return [error(rule, f"{path}: empty; it must write /logs/verifier/reward.json or .txt")]
    found: list[Finding] = []
    interpreter = _shebang_interpreter(text)
    if interpreter is not None and interpreter not in _SHELLS:
        found.append(
            error(
                rule,
                f"{path}: its shebang names {interpreter!r}, but it is run as "
                f"`bash {path.name}` (as Harbor does): write it in bash, and call "
                f"{interpreter} from it",
            )
        )
    if "\r\n" in text:
        found.append(
            error(rule, f"{path}: CRLF line ends; bash would read each '\\r' as part of a command")
        )
    if not found:
        found += _bash_syntax(path)
    return found


def _shebang_interpreter(text: str) -> str | None:
    first = text.splitlines()[0] if text else ""
    if not first.startswith("#!"):
        return None
    try:
        words = shlex.split(first[2:])
    except ValueError:
        words = first[2:].split()
    if not words:
        return None
    name = Path(words[0]).name
    if name == "env":
        rest = [w for w in words[1:] if not w.startswith("-")]
        name = Path(rest[0]).name if rest else "env"
    return name


def _bash_syntax(path: Path) -> list[Finding]:
    bash = shutil.which("bash")
    if bash is None:
        return []
    try:
        result = subprocess.run(
            [bash, "-n", str(path)], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [warning("test-script", f"{path}: could not check its syntax: {exc}")]
    if result.returncode == 0:
        return []
    first = (result.stderr.strip().splitlines() or ["syntax error"])[0]
    return [error("test-script", f"{path}: `bash -n` finds a syntax error: {first}")]


def _graded_by(task: Task) -> list[Path]:
    """The ``test.sh`` each step runs (its own, else the task's), or the task's."""
    if not task.steps:
        return [task.tests_dir / "test.sh"]
    scripts = [
        next((d / "test.sh" for d in reversed(s.tests_dirs) if (d / "test.sh").is_file()), None)
        for s in task.steps
    ]
    return list(dict.fromkeys(p for p in scripts if p is not None))


def lint_solution(task: Task) -> list[Finding]:
    unsolved = [s.name for s in task.steps if s.solution_dir is None]
    if unsolved:
        names = ", ".join(unsolved)
        return [error("solution", f"{task.root}: step(s) {names} have no solution/solve.sh")]
    if task.solution_dir is not None or task.steps:
        return []
    return [
        error(
            "solution",
            f"{task.root}: no solution/solve.sh, so the oracle cannot show the task is solvable",
        )
    ]


def lint_max_reward(task: Task) -> list[Finding]:
    value = task.config.metadata.get("max_reward")
    if value is None:
        return []
    valid = isinstance(value, int | float) and not isinstance(value, bool)
    if valid and math.isfinite(value) and value > 0:
        return []
    return [
        error(
            "max-reward",
            f"metadata.max_reward must be a positive number (the reward the oracle reaches), "
            f"got {value!r}",
        )
    ]


def lint_network(task: Task) -> list[Finding]:
    found: list[Finding] = []
    config = task.config
    phases = [
        name
        for name, public in (
            ("agent", config.agent_network()),
            ("verifier", config.verifier_network_set() is True),
        )
        if public
    ]
    if phases:
        found.append(
            warning(
                "network",
                f"the task asks for public network access ({' and '.join(phases)}): episodes "
                "are less isolated and the outcome may depend on the internet",
            )
        )
    if config.verifier_network_implied():
        found.append(
            info(
                "network",
                "no network field is set: the agent has no network (envfarm's default) and "
                "the verifier, once no process of the agent's runs, has public network access "
                f"(Harbor's default); {VERIFIER_NETWORK_ENV}=none or --verifier-network none "
                "keeps it offline",
            )
        )
    elif config.verifier_network_set() is None:
        why = (
            "it runs in the agent's container (shared mode)"
            if config.verifier.environment_mode == "shared"
            else f"{VERIFIER_NETWORK_ENV}=none"
        )
        found.append(
            info(
                "network",
                f"no network field is set: neither the agent nor the verifier has a network "
                f"(Harbor gives both public); the verifier stays offline because {why}: set "
                '[verifier] network_mode = "public" if the tests need it',
            )
        )
    download = grading_download(task)
    if download is not None:
        consequence = (
            "grading then depends on the network"
            if config.verifier_network()
            else "grading has no network, so this will fail"
        )
        found.append(
            warning(
                "network",
                f"{download} downloads at grading time: {consequence}; install test "
                "dependencies in the image",
            )
        )
    return found


def grading_download(task: Task) -> str | None:
    """``test.sh line 3 (`pip install pytest`)`` for the first command of a test script that
    downloads at grading time; None when none does."""
    for script in _test_scripts(task):
        try:
            text = script.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        match = _DOWNLOADS.search(text)
        if match is not None:
            line = text.count("\n", 0, match.start()) + 1
            return f"{script.name} line {line} (`{match.group(1).strip()}`)"
    return None


def _test_scripts(task: Task) -> Iterator[Path]:
    for name in ("test.sh", "run-tests.sh"):
        if (task.tests_dir / name).is_file():
            yield task.tests_dir / name
    yield from (path for path in _graded_by(task) if task.steps)
