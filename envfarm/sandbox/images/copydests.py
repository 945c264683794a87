"""``COPY``/``ADD`` to ``.`` for the engine's classic builder, read as BuildKit reads it.

BuildKit (Harbor's builder) takes a destination of exactly ``.`` as the working directory,
whatever the number of sources: ``COPY app.cfg notes .`` builds. The classic builder
refuses several sources (or a wildcard matching several files) unless the destination ends in
``/``. Such a destination is given its ``/``, which both builders read the same way, so the
image is the one BuildKit builds. Heredoc ``COPY`` lines are left as written.
"""

from __future__ import annotations

import json

from envfarm.sandbox.images.dockerlines import Source, instructions


def _json_form(args: str) -> str | None:
    words = args.split(" ")
    flags = [w for w in words if w.startswith("--")]
    rest = " ".join(w for w in words if not w.startswith("--")).strip()
    if not rest.startswith("["):
        return None
    try:
        parts = json.loads(rest)
    except ValueError:
        return None
    if not isinstance(parts, list) or len(parts) < 2 or parts[-1] != ".":
        return None
    return " ".join([*flags, json.dumps([*parts[:-1], "./"])])


def _shell_form(args: str) -> str | None:
    words = args.split()
    paths = [w for w in words if not w.startswith("--")]
    if len(paths) < 2 or paths[-1] != ".":
        return None
    return " ".join([*words[:-1], "./"])


def copy_destinations(source: Source) -> int:
    """Give every ``COPY``/``ADD`` to ``.`` its ``/``, in place; the number rewritten."""
    count = 0
    for inst in reversed(instructions(source.text)):
        if inst.keyword not in ("COPY", "ADD") or inst.heredocs:
            continue
        args = inst.args.strip()
        new = _json_form(args) if "[" in args else _shell_form(args)
        if new is None:
            continue
        source.splice(inst.first, inst.last, [f"{inst.keyword} {new}"])
        count += 1
    return count
