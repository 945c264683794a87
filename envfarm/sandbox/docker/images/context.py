"""The build context envfarm sends: the task's own, byte for byte, beside envfarm's Dockerfile.

envfarm builds a task's Dockerfile rewritten (its bases pointed at local images, BuildKit-only
syntax made classic), a file outside the task's context. The engine takes the Dockerfile inside
the context archive, and its classic builder removes it from what ``COPY . .`` sees only when the
context's ``.dockerignore`` excludes it. The Docker SDK (and the docker CLI) make sure of that by
appending the Dockerfile's name to the ``.dockerignore`` they send, so a task that copies its
context gets a ``.dockerignore`` that is not its own.

This archive is built instead: the context's files as Docker selects them (the task's
``.dockerignore`` applied, ``!`` exceptions included; ``.dockerignore`` itself and the task's own
Dockerfile sent unless excluded), plus envfarm's Dockerfile under a name the task's own
``.dockerignore`` already excludes (``*.pyc`` gives ``envfarm-dockerfile-<random>.pyc``), so
that the engine drops it and the ``.dockerignore`` stays as written. A context without a
``.dockerignore``, or one that excludes itself, is given one naming itself and the Dockerfile:
the engine drops both. Only a ``.dockerignore`` that excludes no name envfarm could take gets a
line added (with a warning).
"""

from __future__ import annotations

import os
import re
import secrets
import tempfile
from pathlib import Path
from typing import IO, cast

from docker.utils.build import PatternMatcher, create_archive

IGNORE = ".dockerignore"


def _patterns(text: str) -> list[str]:
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _matcher(patterns: list[str]) -> PatternMatcher:
    """The engine's matcher for ``patterns`` (the SDK's keeps ``.dockerignore`` always; the
    engine does not)."""
    matcher = PatternMatcher(patterns)
    matcher.patterns = matcher.patterns[:-1]
    return matcher


def _matches(matcher: PatternMatcher, name: str) -> bool:
    return bool(matcher.matches(cast("os.PathLike[str]", name)))  # the stubs say PathLike


def _excluded_name(patterns: list[str], taken: set[str], token: str) -> str | None:
    """A file name at the context's root (or in a directory it sends) that ``patterns``
    exclude and the context does not hold."""
    matcher = _matcher(patterns)
    for pattern in patterns:
        if pattern.startswith("!") or "[" in pattern or "\\" in pattern:
            continue
        name = pattern.strip("/").replace("**", "*")
        name = re.sub(r"\*+", f"envfarm-dockerfile-{token}", name).replace("?", "e")
        name = os.path.normpath(name)
        parent = os.path.dirname(name)
        if name.startswith("..") or name in taken or (parent and parent not in taken):
            continue
        if _matches(matcher, name):
            return name
    return None


def ignore_warning(context: Path) -> str | None:
    """The warning when the context's ``.dockerignore`` cannot stay as written."""
    ignore = context / IGNORE
    if not ignore.is_file():
        return None
    patterns = _patterns(ignore.read_text(encoding="utf-8", errors="replace"))
    if _matches(_matcher(patterns), IGNORE):
        return None
    files = set(PatternMatcher(patterns).walk(str(context)))
    if _excluded_name(patterns, files, secrets.token_hex(8)) is not None:
        return None
    return (
        f"{ignore}: it excludes no name envfarm's Dockerfile could take, so the {IGNORE} "
        "the build sees ends with a line naming it"
    )


def context_archive(context: Path, dockerfile: str) -> tuple[IO[bytes], str]:
    """(the archive, the name of ``dockerfile`` in it) for a build of ``context``."""
    ignore = context / IGNORE
    text = ignore.read_text(encoding="utf-8", errors="replace") if ignore.is_file() else None
    patterns = _patterns(text or "")
    files = sorted(PatternMatcher(patterns).walk(str(context)))
    if text is None:
        files = [name for name in files if name != IGNORE]
    token = secrets.token_hex(8)
    name = f".envfarm-dockerfile-{token}"
    extra = [(name, dockerfile)]
    self_excluded = _matches(_matcher(patterns), IGNORE)
    if text is None:
        extra.append((IGNORE, f"{IGNORE}\n{name}\n"))
    elif self_excluded:
        extra.append((IGNORE, f"{text}\n{name}\n"))
    elif (found := _excluded_name(patterns, set(files), token)) is not None:
        extra[0] = (found, dockerfile)
        name = found
    else:
        extra.append((IGNORE, f"{text}\n{name}\n"))
    archive = tempfile.TemporaryFile()  # noqa: SIM115 - handed to the caller, who closes it
    create_archive(str(context), files=files, fileobj=archive, extra_files=extra)
    return archive, name
