"""The files of a Harbor task directory besides ``task.toml``, checked before anything runs.

``instruction.md`` holds the prompt; ``tests/test.sh`` grades (a multi-step task's steps have
their own: ``spec.steps``); ``environment/Dockerfile`` builds
the image unless ``[environment].docker_image`` or the compose file's ``main`` service names one;
``solution/solve.sh`` is the oracle's. A missing or unsupported file (Windows scripts, a seeded
``trajectory.json``) is an ``Issue`` naming the file, so that ``load_task`` reports every
problem of a task at once; ``artifacts[].service`` must name a service of the compose file.
"""

from __future__ import annotations

from pathlib import Path

from envfarm.spec.compose import ComposeSpec
from envfarm.spec.config import TaskConfig
from envfarm.spec.config_values import NOT_YET
from envfarm.spec.errors_fmt import Issue

TASK_FILE = "task.toml"
LEGACY_FILE = "task.yaml"


def read_instruction(path: Path) -> tuple[str, list[Issue]]:
    """The prompt in ``instruction.md``, or "" and why it cannot be used."""
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


def check_layout(
    root: Path, config: TaskConfig | None, compose: ComposeSpec | None, *, multi_step: bool = False
) -> list[Issue]:
    """Every problem of the files around ``task.toml`` (``config`` None: it was unreadable;
    ``multi_step``: it has ``[[steps]]``, even if unreadable)."""
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
    if multi_step:
        pass  # each step's tests are checked with the step (``spec.steps``)
    elif (tests / "test.bat").is_file() and not (tests / "test.sh").is_file():
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
