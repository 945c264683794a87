"""Load Harbor task directories into ``Task`` values, one directory or a whole tree at a time.

A task directory is the one holding ``task.toml`` (or a legacy Terminal-Bench ``task.yaml``,
read by ``spec.legacy``); discovery never looks inside a task for more tasks. Every problem
of one task (its ``task.toml`` and its files) is reported in a single ``TaskSpecError``, and
discovery keeps going past bad tasks, so a run can start the good ones and report the rest.

The loaded value is ``spec.loaded_task.Task`` (importable from here, as ever); the files a
directory must hold are checked by ``spec.layout`` and what was loaded is identified by
``spec.content_hash``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from envfarm.errors import TaskSpecError
from envfarm.spec.compose_load import compose_for_task
from envfarm.spec.content_hash import content_hash
from envfarm.spec.datasets import dataset_tasks, is_dataset_path
from envfarm.spec.errors_fmt import Issue, spec_error
from envfarm.spec.layout import LEGACY_FILE, TASK_FILE, check_layout, read_instruction
from envfarm.spec.legacy import load_legacy_task
from envfarm.spec.loaded_task import Task
from envfarm.spec.steps import TaskStep, load_steps
from envfarm.spec.task_toml import read_task_config, read_toml

__all__ = ["LEGACY_FILE", "TASK_FILE", "Task", "content_hash", "discover_tasks", "load_task"]


def load_task(path: Path) -> Task:
    """Load the task directory ``path`` (or its ``task.toml``); raise TaskSpecError if unsound."""
    root = path.parent if path.name in (TASK_FILE, LEGACY_FILE) and path.is_file() else path
    if not root.is_dir():
        problem = "does not exist" if not root.exists() else "is not a task directory"
        raise TaskSpecError(str(path), problem)
    toml_path = root / TASK_FILE
    if not toml_path.is_file():
        if (root / LEGACY_FILE).is_file():
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
    steps: tuple[TaskStep, ...] = ()
    multi_step = bool(data.get("steps")) if data is not None else False
    instruction = ""
    instruction_issues: list[Issue] = []
    if config is not None:
        steps, step_issues, step_warnings = load_steps(root.resolve(), config)
        issues, warnings = issues + step_issues, warnings + step_warnings
    if not multi_step:
        instruction, instruction_issues = read_instruction(root / "instruction.md")
    loaded = compose_for_task(root / "environment", config) if config is not None else None
    compose = loaded.spec if loaded is not None else None
    if loaded is not None:
        issues += loaded.issues
        warnings += loaded.warnings
    issues += instruction_issues + check_layout(root, config, compose, multi_step=multi_step)
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
        steps=steps,
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
