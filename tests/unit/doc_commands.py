"""The commands the README and docs show, read out of their code blocks.

A command is a line of a fenced code block whose first word is one envfarm documents
(``envfarm``, ``.venv/bin/...``, ``python``, ``scripts/...``, ``kubectl``, ``docker``...). In a
block that shows a session (lines starting ``$ ``), only those lines are commands; the rest is
output. A line ending in ``\\`` and an indented line starting with ``[`` or ``--`` (a synopsis
wrapped for width) continue the command above. ``&&``, ``|``, ``;`` and a trailing ``&`` separate
commands; ``#`` starts a comment.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = ("envfarm", "python", "python3", "kubectl", "docker", "git", "curl", "kind", "pytest")
TOP = ("envfarm", "docs", "tests", "scripts", "bench", "examples", "images", "tasks", "manifests")
FLAG = re.compile(r"(?<![\w/-])(--?[a-zA-Z][\w-]*)")
SEPARATOR = re.compile(r"\s+(?:&&|\|\||\||;)\s+|\s+&\s*$")


@dataclass(frozen=True)
class Command:
    where: str
    """``file:line`` of the command's first line."""
    text: str

    @property
    def words(self) -> list[str]:
        try:
            return shlex.split(self.text)
        except ValueError:  # a quote opened on a line the block continues in a heredoc
            return self.text.split()

    @property
    def program(self) -> str:
        first = self.words[0]
        return first.removeprefix(".venv/bin/")

    def flags(self) -> list[str]:
        """Every option the command names, a synopsis's ``[--x]`` and ``--a/--b`` included."""
        text = re.sub(r"'[^']*'|\"[^\"]*\"", "", self.text)  # no flags inside quoted arguments
        found = FLAG.findall(text.replace("/--", " --"))
        return [flag.split("=")[0] for flag in found if not flag[1:].isdigit()]

    def paths(self) -> list[str]:
        """The repository paths the command names (placeholders such as OUT_DIR are not)."""
        named = []
        for word in self.words:
            word = word.split("=", 1)[-1]
            first = word.split("/", 1)[0]
            task_id = first == "envfarm" and (REPO / "tasks" / word.partition("/")[2]).is_dir()
            placeholder = re.search(r"[<>{}$]|[A-Z]{3,}", word)
            if "/" in word and first in TOP and not placeholder and not task_id:
                named.append(word.rstrip("/"))
        return named


def _is_command(line: str) -> bool:
    first = line.split(maxsplit=1)[0] if line.strip() else ""
    first = first.removeprefix(".venv/bin/")
    script = first.startswith(("scripts/", "bench/", "examples/")) and not first.endswith("/")
    return first in PROGRAMS or script


def commands_in(path: Path) -> list[Command]:
    """The commands of every code block of a Markdown file."""
    found: list[Command] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    block: list[tuple[int, str]] = []
    inside = False
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            if inside:
                found += _block_commands(path, block)
            inside, block = not inside, []
        elif inside:
            block.append((number, line))
    return found


def commands_in_docstring(path: Path) -> list[Command]:
    """The indented command lines of a Python file's module docstring (an example's usage)."""
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    block = [(n, line.removeprefix("    ")) for n, line in enumerate(docstring.splitlines(), 1)]
    return _block_commands(path, [(n, line) for n, line in block if line.strip()])


def _block_commands(path: Path, block: list[tuple[int, str]]) -> list[Command]:
    session = any(line.startswith("$ ") for _, line in block)
    joined: list[tuple[int, str]] = []
    continuing = False
    for number, line in block:
        stripped = line.strip()
        wrapped = line[:1].isspace() and stripped.startswith(("[", "--"))
        if joined and (continuing or wrapped):
            start, text = joined[-1]
            joined[-1] = (start, f"{text} {stripped.rstrip(chr(92)).strip()}")
        elif not session or line.startswith("$ "):
            text = line.removeprefix("$ ").strip()
            if _is_command(text):
                joined.append((number, text.rstrip("\\").strip()))
            else:
                continuing = False
                continue
        else:
            continue
        continuing = stripped.endswith("\\")
    commands = []
    shown = path.relative_to(REPO)
    for number, text in joined:
        text = re.sub(r"\s+#.*$", "", text)
        for part in SEPARATOR.split(text):
            if part.strip() and _is_command(part.strip()):
                commands.append(Command(f"{shown}:{number}", part.strip()))
    return commands


IMPORT = re.compile(r"^\s*from (envfarm[\w.]*) import ([\w, ]+)$")


def documented_imports() -> list[tuple[str, str, list[str]]]:
    """``(where, module, names)`` of each ``from envfarm... import ...`` line of a code block."""
    found = []
    for source in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        inside = False
        for number, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("```"):
                inside = not inside
            elif inside and (match := IMPORT.match(line)):
                names = [name.strip() for name in match.group(2).split(",")]
                found.append((f"{source.relative_to(REPO)}:{number}", match.group(1), names))
    return found


def documented_commands() -> list[Command]:
    sources = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    found = [command for source in sources for command in commands_in(source)]
    for example in sorted((REPO / "examples").glob("*.py")):
        found += commands_in_docstring(example)
    return found
