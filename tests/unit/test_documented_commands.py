"""Every command the README, the docs and the examples show runs as written from a clean clone,
as far as can be known without running it: each ``envfarm`` subcommand exists and takes every
flag shown (its ``--help`` works), each ``python -m``/example script answers ``--help`` and
knows its flags, each script and file named exists, each ``from envfarm... import`` imports.
The ``kubectl`` lines of docs/kubernetes.md, which need a cluster, are checked against the
manifests as ``kubectl kustomize`` renders them: what ``apply -k`` applies renders, and every
resource a line names is one those manifests define.
"""

from __future__ import annotations

import fnmatch
import importlib
import os
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from envfarm.cli.main import cli
from envfarm.k8s.api import KubeObject
from tests.manifests import kustomize
from tests.unit.doc_commands import REPO, Command, documented_commands, documented_imports

COMMANDS = documented_commands()
BUILTIN_KINDS = {"deployment", "statefulset", "service", "secret", "configmap", "namespace"}
CLUSTER_KINDS = {"nodes", "pods"}
"""What every cluster has, whatever envfarm's manifests define: a line may list them."""


def _ids(commands: list[Command]) -> list[str]:
    return [f"{c.where} {c.text[:40]}" for c in commands]


def _of(*programs: str) -> list[Command]:
    return [c for c in COMMANDS if c.program in programs]


def test_the_docs_show_commands_of_every_kind() -> None:
    programs = {c.program for c in COMMANDS}
    assert {"envfarm", "python", "kubectl", "scripts/setup"} <= programs, programs
    assert len(_of("envfarm")) >= 15


def _subcommand(words: list[str]) -> tuple[click.Command, list[str]]:
    command: click.Command = cli
    path: list[str] = []
    for word in words[1:]:
        found = None
        if isinstance(command, click.Group):
            found = command.get_command(click.Context(command), word)
        if found is None:
            break
        command = found
        path.append(word)
    return command, path


def _options(command: click.Command) -> set[str]:
    names = {"--help", "-h"}
    for param in command.params:
        if isinstance(param, click.Option):
            names |= {*param.opts, *param.secondary_opts}
    return names


@pytest.mark.parametrize("command", _of("envfarm"), ids=_ids(_of("envfarm")))
def test_envfarm_commands_parse(command: Command) -> None:
    subcommand, path = _subcommand(command.words)
    assert path, f"{command.where}: no envfarm subcommand in {command.text!r}"
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    unknown = [f for f in command.flags() if f not in _options(subcommand)]
    assert not unknown, f"{command.where}: envfarm {' '.join(path)} has no {unknown}"


def _python_target(words: list[str]) -> list[str] | None:
    """The module (``-m X``) or script a python command runs, as argv; None for pytest."""
    for index, word in enumerate(words[1:], 1):
        if word == "-m":
            module = words[index + 1]
            return None if module == "pytest" else ["-m", module]
        if not word.startswith("-"):
            return [word]
    return None


@pytest.mark.parametrize("command", _of("python", "python3"), ids=_ids(_of("python", "python3")))
def test_python_commands_parse(command: Command) -> None:
    target = _python_target(command.words)
    if target is None or (target[0] != "-m" and not (REPO / target[0]).is_file()):
        return  # pytest, or a file the same code block writes (plan.py)
    env = {**os.environ, "PYTHONPATH": ""}  # as a user runs it: envfarm from the virtualenv
    shown = subprocess.run(
        [sys.executable, *target, "--help"], capture_output=True, text=True, cwd=REPO, env=env
    )
    assert shown.returncode == 0, f"{command.where}: {shown.stderr}"
    start = command.words.index(target[-1]) + 1
    flags = Command(command.where, shlex.join(command.words[start:])).flags()
    unknown = [flag for flag in flags if flag not in shown.stdout]
    assert not unknown, f"{command.where}: {' '.join(target)} has no {unknown}"


def test_virtualenv_tools_and_scripts_exist() -> None:
    bin_dir = Path(sys.executable).parent
    for command in COMMANDS:
        first = command.words[0]
        if first.startswith(".venv/bin/"):
            tool = first.removeprefix(".venv/bin/")
            assert (bin_dir / tool).exists(), f"{command.where}: no {tool} in the virtualenv"
        if first.startswith(("scripts/", "bench/", "examples/")):
            assert os.access(REPO / first, os.X_OK), f"{command.where}: {first} not executable"


@cache
def _clone() -> tuple[str, ...] | None:
    """The files a clean clone has (tracked ones), or None outside a git checkout."""
    listed = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=REPO)
    return tuple(listed.stdout.splitlines()) if listed.returncode == 0 else None


def _in_clone(path: str) -> bool:
    tracked = _clone()
    if tracked is None:
        return any(REPO.glob(path)) if "*" in path else (REPO / path).exists()
    pattern = path if "*" in path else f"{path}*"
    return any(fnmatch.fnmatch(f, pattern) and f.startswith(path.split("*")[0]) for f in tracked)


def test_every_file_a_command_names_is_in_a_clean_clone() -> None:
    missing = [f"{c.where}: {path}" for c in COMMANDS for path in c.paths() if not _in_clone(path)]
    assert not missing


@pytest.mark.parametrize(("where", "module", "names"), documented_imports())
def test_documented_imports_import(where: str, module: str, names: list[str]) -> None:
    imported = importlib.import_module(module)
    absent = [name for name in names if not hasattr(imported, name)]
    assert not absent, f"{where}: {module} has no {absent}"


@cache
def _rendered(directory: str) -> tuple[KubeObject, ...]:
    return tuple(kustomize(REPO / directory))


def _documents(path: Path) -> list[KubeObject]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def _cluster() -> list[KubeObject]:
    """What the documented development cluster holds: the dev overlay and the examples."""
    examples = sorted((REPO / "manifests" / "examples").glob("*.yaml"))
    return [*_rendered("manifests/overlays/dev"), *(o for e in examples for o in _documents(e))]


def _kinds(objects: list[KubeObject]) -> dict[str, dict[str, Any]]:
    """Every name kubectl accepts for each custom resource: plural, singular, short, kind."""
    names: dict[str, dict[str, Any]] = {}
    for crd in (o for o in objects if o["kind"] == "CustomResourceDefinition"):
        spoken = crd["spec"]["names"]
        for name in (spoken["plural"], spoken.get("singular"), *spoken.get("shortNames", [])):
            if name:
                names[name] = crd
        names[spoken["kind"].lower()] = crd
    return names


def _kubectl_refs(words: list[str]) -> tuple[str | None, list[tuple[str, str | None]]]:
    """The namespace (``-n``) and each ``(kind, name)`` a kubectl line names."""
    namespace = words[words.index("-n") + 1] if "-n" in words else None
    verbs = [w for w in words[1:] if not w.startswith("-") and w != namespace]
    refs: list[tuple[str, str | None]] = []
    if verbs and verbs[0] in ("get", "patch", "scale", "rollout", "port-forward", "describe"):
        rest = verbs[2:] if verbs[0] == "rollout" else verbs[1:]
        if rest and "/" in rest[0]:
            kind, _, name = rest[0].partition("/")
            refs.append((kind, name))
        elif rest:
            refs.append((rest[0], rest[1] if len(rest) > 1 else None))
    return namespace, refs


@pytest.mark.parametrize("command", _of("kubectl"), ids=_ids(_of("kubectl")))
def test_kubectl_lines_match_the_rendered_manifests(command: Command) -> None:
    words = command.words
    if "-k" in words:
        assert _rendered(words[words.index("-k") + 1]), f"{command.where}: renders nothing"
    if "-f" in words:
        assert _documents(REPO / words[words.index("-f") + 1])
    objects = _cluster()
    kinds = _kinds(objects)
    namespace, refs = _kubectl_refs(words)
    for kind, name in refs:
        if kind in CLUSTER_KINDS and name is None:
            continue
        if kind in BUILTIN_KINDS:
            found = [
                o for o in objects
                if o["kind"].lower() == kind and o["metadata"]["name"] == name
                and o["metadata"].get("namespace") in (namespace, None)
            ]  # fmt: skip
            assert found, f"{command.where}: the manifests define no {kind}/{name} in {namespace}"
        else:
            assert kind in kinds, f"{command.where}: no custom resource is called {kind!r}"
            if "scale" in words:
                versions = kinds[kind]["spec"]["versions"]
                assert all("scale" in v.get("subresources", {}) for v in versions)
