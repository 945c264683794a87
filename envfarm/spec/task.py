"""Load Harbor task directories into ``Task`` values, one directory or a whole tree at a time.

A task directory is the one holding ``task.toml`` (or a legacy Terminal-Bench ``task.yaml``,
read by ``spec.legacy``); discovery never looks inside a task for more tasks. Every problem
of one task (its ``task.toml`` and its files) is reported in a single ``TaskSpecError``, and
discovery keeps going past bad tasks, so a run can start the good ones and report the rest.

``content_hash`` identifies exactly what was loaded: sha256 over the sorted relative paths of
every file, each with its exec bit and the sha256 of its bytes (a symlink hashes its target
text). ``__pycache__``, ``.git`` and ``*.pyc`` are skipped, as they change without the task
changing.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envfarm.errors import TaskSpecError
from envfarm.spec.compose import ComposeSpec, is_idle_command
from envfarm.spec.compose_load import compose_for_task
from envfarm.spec.config import NOT_YET, TaskConfig
from envfarm.spec.datasets import dataset_tasks, is_dataset_path
from envfarm.spec.errors_fmt import Issue, spec_error
from envfarm.spec.task_toml import read_task_config, read_toml

TASK_FILE = "task.toml"
LEGACY_FILE = "task.yaml"
_SKIPPED_DIRS = frozenset({"__pycache__", ".git"})
_SKIPPED_SUFFIXES = (".pyc",)


@dataclass(frozen=True)
class Task:
    id: str
    """``[task].name`` when set, else the directory name."""
    root: Path
    config: TaskConfig
    instruction: str
    environment_dir: Path
    dockerfile: Path | None
    """The main image's Dockerfile: ``environment/Dockerfile``, or the one the compose file's
    ``main`` service builds; None when the main image is a named one (``docker_image``, or
    ``image:`` of the ``main`` service)."""
    tests_dir: Path
    solution_dir: Path | None
    """``solution/`` when ``solution/solve.sh`` exists."""
    content_hash: str
    compose: ComposeSpec | None = None
    """``environment/docker-compose.yaml`` (main container plus sidecars), when present."""
    unknown: dict[str, Any] = field(default_factory=dict)
    """Keys of ``task.toml`` no model declares (dotted key -> value): ignored, as Harbor does,
    and each one is among ``warnings``."""
    warnings: tuple[Issue, ...] = ()
    """What loading tolerated (unknown keys, an unknown schema, compose keys that have no
    effect here...): printed by ``envfarm run``, lint findings of ``envfarm check``."""

    @property
    def main_command(self) -> list[str] | None:
        """The compose ``command`` of ``main`` when it is not an idle one (Harbor's own is
        ``["sh", "-c", "sleep infinity"]``): the main container's process, run after the
        entrypoint as Docker would (``main_entrypoint``, else the image's ``ENTRYPOINT``).
        None: nothing of the task's own; the container idles as under Harbor."""
        command = self.compose.main.command if self.compose is not None else None
        return None if command is None or is_idle_command(command) else list(command)

    @property
    def main_entrypoint(self) -> list[str] | None:
        """The compose ``entrypoint`` of ``main`` (None: the image's ``ENTRYPOINT``; ``[]``:
        none at all, as compose's ``entrypoint: []`` means)."""
        entrypoint = self.compose.main.entrypoint if self.compose is not None else None
        return None if entrypoint is None else list(entrypoint)


def _read_instruction(path: Path) -> tuple[str, list[Issue]]:
    where = str(path)
    if not path.is_file():
        return "", [Issue(where, None, "missing: instruction.md holds the prompt for the agent")]
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return "", [Issue(where, None, "not UTF-8 text")]
    except OSError as exc:
        return "", [Issue(where, None, f"cannot read: {exc.strerror or exc}")]
    if not text.strip():
        return "", [Issue(where, None, "is empty: it must hold the prompt for the agent")]
    return text, []


def _check_layout(
    root: Path, config: TaskConfig | None, compose: ComposeSpec | None
) -> list[Issue]:
    issues: list[Issue] = []

    def problem(path: Path, message: str) -> None:
        issues.append(Issue(str(path), None, message))

    env_dir, tests, solution = root / "environment", root / "tests", root / "solution"
    names_main_image = compose is not None and (
        compose.main.image is not None or compose.main.build_context is not None
    )
    needs_dockerfile = (
        config is not None and config.environment.docker_image is None and not names_main_image
    )
    if needs_dockerfile and not (env_dir / "Dockerfile").is_file():
        problem(
            env_dir / "Dockerfile",
            "missing: the task image is built from environment/Dockerfile (or set "
            "[environment].docker_image to a prebuilt image)",
        )
    if (tests / "test.bat").is_file() and not (tests / "test.sh").is_file():
        problem(tests / "test.bat", f"Windows tests (test.bat) are {NOT_YET}; write tests/test.sh")
    elif not (tests / "test.sh").is_file():
        problem(
            tests / "test.sh",
            "missing: tests/test.sh grades the episode by writing /logs/verifier/reward.json "
            "or /logs/verifier/reward.txt",
        )
    if (solution / "solve.bat").is_file() and not (solution / "solve.sh").is_file():
        problem(
            solution / "solve.bat",
            f"Windows solutions (solve.bat) are {NOT_YET}; write solution/solve.sh",
        )
    compose_unread = compose is None and (env_dir / "docker-compose.yaml").is_file()
    if config is not None and not compose_unread:  # an unreadable one has its own error
        issues += _artifact_services(root / TASK_FILE, config, compose)
    if (root / "trajectory.json").is_file():
        problem(
            root / "trajectory.json",
            f"seeding the agent with a prior trajectory is {NOT_YET}; remove trajectory.json",
        )
    return issues


def _artifact_services(toml: Path, config: TaskConfig, compose: ComposeSpec | None) -> list[Issue]:
    """Every ``artifacts[].service`` must be a service of the compose file."""
    issues = []
    known = sorted(compose.sidecars) if compose is not None else []
    for index, spec in enumerate(config.artifacts):
        if spec.sidecar is None or spec.sidecar in known:
            continue
        where = f"artifacts[{index}].service"
        if compose is None:
            message = (
                f"{spec.sidecar!r} names a service, but the task has no "
                "environment/docker-compose.yaml (leave service out for the main container)"
            )
        else:
            message = (
                f"{spec.sidecar!r} is not a service of environment/docker-compose.yaml; "
                f"its services: {', '.join(['main', *known])}"
            )
        issues.append(Issue(str(toml), where, message))
    return issues


def _hashed_files(root: Path) -> Iterator[str]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIPPED_DIRS]
        linked_dirs = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        for name in [*filenames, *linked_dirs]:
            if not name.endswith(_SKIPPED_SUFFIXES):
                yield os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")


def content_hash(root: Path) -> str:
    """sha256 hex of the task's files; raises TaskSpecError when one cannot be read."""
    digest = hashlib.sha256()
    for relative in sorted(_hashed_files(root)):
        path = root / relative
        try:
            if path.is_symlink():
                kind, data = "l", hashlib.sha256(os.readlink(path).encode()).hexdigest()
            else:
                with path.open("rb") as handle:
                    data = hashlib.file_digest(handle, "sha256").hexdigest()
                kind = "x" if path.stat().st_mode & 0o111 else "-"
        except OSError as exc:
            raise TaskSpecError(str(path), f"cannot read: {exc.strerror or exc}") from exc
        digest.update(f"{kind} {data} {relative}\0".encode())
    return digest.hexdigest()


def load_task(path: Path) -> Task:
    """Load the task directory ``path`` (or its ``task.toml``); raise TaskSpecError if unsound."""
    root = path.parent if path.name in (TASK_FILE, LEGACY_FILE) and path.is_file() else path
    if not root.is_dir():
        problem = "does not exist" if not root.exists() else "is not a task directory"
        raise TaskSpecError(str(path), problem)
    toml_path = root / TASK_FILE
    if not toml_path.is_file():
        if (root / LEGACY_FILE).is_file():
            from envfarm.spec.legacy import load_legacy_task  # it builds on this module

            return load_legacy_task(root)
        raise TaskSpecError(str(root), f"not a task directory: it has no {TASK_FILE}")
    data, issues = read_toml(toml_path)
    config, unknown, warnings = None, {}, []
    if data is not None:
        try:
            parsed = read_task_config(data, str(toml_path))
        except TaskSpecError as exc:
            issues.append(Issue(exc.path, exc.field, exc.detail))
        else:
            config, unknown, warnings = parsed.config, parsed.unknown, parsed.warnings
    instruction, instruction_issues = _read_instruction(root / "instruction.md")
    loaded = compose_for_task(root / "environment", config) if config is not None else None
    compose = loaded.spec if loaded is not None else None
    if loaded is not None:
        issues += loaded.issues
        warnings += loaded.warnings
    issues += instruction_issues + _check_layout(root, config, compose)
    if issues or config is None:
        raise spec_error(issues)
    resolved = root.resolve()
    dockerfile: Path | None = resolved / "environment" / "Dockerfile"
    if compose is not None and compose.main.build_dockerfile is not None:
        dockerfile = resolved / "environment" / compose.main.build_dockerfile
    elif compose is not None and compose.main.image is not None:
        dockerfile = None
    has_solution = (resolved / "solution" / "solve.sh").is_file()
    return Task(
        id=config.task.name or resolved.name,
        root=resolved,
        config=config,
        instruction=instruction,
        environment_dir=resolved / "environment",
        dockerfile=dockerfile if dockerfile is not None and dockerfile.is_file() else None,
        tests_dir=resolved / "tests",
        solution_dir=resolved / "solution" if has_solution else None,
        content_hash=content_hash(resolved),
        compose=compose,
        unknown=unknown,
        warnings=tuple(warnings),
    )


def _task_dirs(path: Path) -> tuple[list[Path], list[TaskSpecError]]:
    """Task directories at or below ``path``, plus an error for each place that is not one."""
    if path.is_file() and path.name in (TASK_FILE, LEGACY_FILE):
        return [path.parent], []
    if not path.is_dir():
        problem = "does not exist" if not path.exists() else "is not a directory"
        return [], [TaskSpecError(str(path), problem)]
    found: list[Path] = []
    errors: list[TaskSpecError] = []
    for dirpath, dirnames, filenames in os.walk(path):
        here = Path(dirpath)
        if TASK_FILE in filenames or LEGACY_FILE in filenames:
            dirnames.clear()
            found.append(here)
            continue
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
    if not found and not errors:
        errors.append(TaskSpecError(str(path), f"no task found: no {TASK_FILE} here or below"))
    return found, errors


def discover_tasks(paths: Sequence[Path]) -> tuple[list[Task], list[TaskSpecError]]:
    """Load every task at or below ``paths``; bad tasks become errors and never stop the rest.

    A path that is a dataset file (``spec.datasets``: JSON, JSONL, Parquet of SWE-bench-style
    records) gives one task per good record; each bad record is an error of its own.

    A task id seen before (from another directory) is an error for the later directory.
    """
    tasks: list[Task] = []
    errors: list[TaskSpecError] = []
    owners: dict[str, Path] = {}
    loaded_roots: set[Path] = set()
    for path in paths:
        roots, path_errors = dataset_tasks(str(path)) if is_dataset_path(path) else _task_dirs(path)
        errors += path_errors
        for root in roots:
            if root.resolve() in loaded_roots:
                continue
            loaded_roots.add(root.resolve())
            try:
                task = load_task(root)
            except TaskSpecError as exc:
                errors.append(exc)
                continue
            if task.id in owners:
                errors.append(
                    TaskSpecError(
                        path=str(root / TASK_FILE),
                        field="task.name" if task.config.task.name else None,
                        message=f"duplicate task id {task.id!r}, already used by "
                        f"{owners[task.id]}; give one of them a different [task].name",
                    )
                )
                continue
            owners[task.id] = task.root
            tasks.append(task)
    return tasks, errors
