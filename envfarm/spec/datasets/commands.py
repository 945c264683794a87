"""The test command of each repository and version (SWE-bench's harness keeps it per repo).

The shipped table (``test_commands.toml``, package data) covers the repositories SWE-bench
covers; ``ENVFARM_DATASET_COMMANDS`` names a user table merged over it (a repository's table,
or one version's, replaces the shipped one key by key). A record's own ``test_cmd`` and
``log_parser`` win over both. An unknown repository without a ``test_cmd`` is an error.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any

from envfarm.errors import TaskSpecError
from envfarm.settings import Settings
from envfarm.spec.datasets.records import SweRecord

COMMANDS_ENV = "ENVFARM_DATASET_COMMANDS"  # read by envfarm.settings
LOG_PARSERS = ("pytest", "django", "sympy")
LABEL_STYLES = ("files", "django_modules")


@dataclass(frozen=True)
class RepoCommand:
    test_cmd: str
    log_parser: str
    setup: tuple[str, ...]
    labels: str


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_table(environ: dict[str, str] | None = None) -> dict[str, Any]:
    shipped = resources.files("envfarm.spec.datasets").joinpath("test_commands.toml")
    table = tomllib.loads(shipped.read_text(encoding="utf-8"))
    path = Settings.from_env(environ).dataset_commands
    if path is not None:
        try:
            table = _merge(table, tomllib.loads(path.read_text(encoding="utf-8")))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise TaskSpecError(str(path), f"cannot read the test-command table: {exc}") from exc
    return table


def command_for(record: SweRecord, table: dict[str, Any], where: str) -> RepoCommand:
    """The command of ``record``: its own, else its repository's (at its version)."""
    repo = table.get("repos", {}).get(record.repo, {})
    entry = {k: v for k, v in repo.items() if k != "versions"}
    if record.version is not None:
        entry.update(repo.get("versions", {}).get(record.version, {}))
    if record.test_cmd:
        entry["test_cmd"] = record.test_cmd
    if record.log_parser:
        entry["log_parser"] = record.log_parser
    label = f"instance {record.instance_id!r}"
    if not entry.get("test_cmd"):
        raise TaskSpecError(
            where,
            f"{label}: no test command for repository {record.repo!r}: add it to a table named "
            f"by {COMMANDS_ENV} (docs/datasets.md) or give the record a 'test_cmd'",
        )
    parser = entry.get("log_parser", "pytest")
    if parser not in LOG_PARSERS:
        raise TaskSpecError(
            where, f"{label}: log_parser {parser!r}: expected one of {', '.join(LOG_PARSERS)}"
        )
    labels = entry.get("labels", "files")
    if labels not in LABEL_STYLES:
        raise TaskSpecError(
            where, f"{label}: labels {labels!r}: expected one of {', '.join(LABEL_STYLES)}"
        )
    setup = entry.get("setup", table.get("defaults", {}).get("setup", []))
    return RepoCommand(str(entry["test_cmd"]), parser, tuple(map(str, setup)), labels)


def patch_files(patch: str) -> list[str]:
    """The paths a unified diff touches (its ``+++``/``---`` sides, ``/dev/null`` aside)."""
    files: list[str] = []
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            parts = line.split(" ")
            if len(parts) >= 4 and parts[-1].startswith("b/"):
                files.append(parts[-1][2:])
        elif line.startswith(("+++ b/", "--- a/")):
            files.append(line[6:].split("\t")[0])
    return list(dict.fromkeys(files))


def command_labels(files: list[str], style: str) -> list[str]:
    """What the command is given: the files, or Django's module labels of the test files."""
    if style == "files":
        return files
    labels = []
    for name in files:
        if name.endswith(".py") and name.startswith("tests/"):
            labels.append(name.removeprefix("tests/").removesuffix(".py").replace("/", "."))
    return labels
