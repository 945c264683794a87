"""``RUN --mount`` (and ``RUN --network``) for the engine's classic builder.

envfarm builds through the engine's classic build API, which refuses BuildKit's ``RUN`` flags,
and public Dockerfiles use them often (``--mount=type=cache,target=/root/.cache/uv``, uv's binary
bound from its image). Each such ``RUN`` in shell form is rewritten to what it does:

- a ``bind`` mount's source (from the build context, a stage or an image) is copied to a staging
  path by a ``COPY`` just before, put at the target for the command and removed after it (a file
  the image had at the target is moved aside and restored), so the image ends as BuildKit leaves
  it; the staged copy stays in that ``COPY``'s layer;
- a ``cache`` or ``tmpfs`` mount becomes an empty directory at the target for the command,
  removed after (what the image had there is restored): builds are slower, never different;
- ``secret`` and ``ssh`` mounts cannot be given offline: dropped, with a warning;
- ``--network`` is dropped (the classic builder gives ``RUN`` the default network).

The command itself runs unchanged through ``eval`` of its text (base64 in the Dockerfile, so no
quoting or ``#`` of the author's can reach the wrapper), heredocs as ``heredocs.py`` runs them.
Exec-form ``RUN`` is left as written.
"""

from __future__ import annotations

import shlex

from pydantic import BaseModel, ConfigDict

from envfarm.sandbox.images.copydests import copy_destinations
from envfarm.sandbox.images.dockerlines import Source, instructions
from envfarm.sandbox.images.heredocs import shell_text, wrapped_run

STAGING = "/.envfarm-mounts"


class _Mount(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str
    target: str
    source: str | None = None
    origin: str | None = None
    """``from=``: a stage or an image; None is the build context."""


def _parse_mount(spec: str) -> _Mount:
    options: dict[str, str] = {}
    for part in spec.split(","):
        key, _, value = part.partition("=")
        options[key.strip().lower()] = value.strip()
    target = options.get("target") or options.get("dst") or options.get("destination") or ""
    return _Mount(
        kind=options.get("type", "bind"),
        target=target,
        source=options.get("source") or options.get("src"),
        origin=options.get("from"),
    )


def _flags(args: str) -> tuple[list[str], str]:
    words = args.split(" ")
    flags: list[str] = []
    while words and (words[0].startswith("--") or not words[0]):
        word = words.pop(0)
        if word:
            flags.append(word)
    return flags, " ".join(words).strip()


def classic_dockerfile(text: str, where: str) -> tuple[str, list[str]]:
    """``text`` with every shell-form ``RUN --mount``/``--network``, every ``RUN`` heredoc
    (``heredocs.py``) and every ``COPY`` to ``.`` rewritten, and warnings."""
    source = Source.of(text)
    warnings = classic_source(source, where)
    return source.text, warnings


def classic_source(source: Source, where: str) -> list[str]:
    """``classic_dockerfile`` on a ``Source``, in place: each rewritten line keeps the origin
    of the line it replaces. ``COPY``/``ADD`` to ``.`` get their ``/`` (``copydests.py``)."""
    copy_destinations(source)
    warnings: list[str] = []
    count = 0
    for inst in reversed(instructions(source.text)):
        if inst.keyword != "RUN" or not (inst.args.startswith("--") or inst.heredocs):
            continue
        flags, command = _flags(inst.args)
        if command.startswith("["):
            continue
        line = source.origins[inst.first] + 1
        heredoc = shell_text(inst, command)
        text, script = heredoc if heredoc is not None else (command, False)
        mounts = [_parse_mount(f[len("--mount=") :]) for f in flags if f.startswith("--mount=")]
        if any(not m.target for m in mounts):
            continue
        if not flags:
            source.splice(inst.first, inst.last, wrapped_run(text, script, str(line)))
            continue
        copies, setup, cleanup = [], [], []
        for mount in mounts:
            count += 1
            target, aside = (
                shlex.quote(mount.target),
                shlex.quote(f"{mount.target}.envfarm-{count}"),
            )
            setup.append(f"if [ -e {target} ] || [ -L {target} ]; then mv {target} {aside}; fi")
            setup.append(f'mkdir -p "$(dirname {target})"')
            if mount.kind == "bind":
                staged = f"{STAGING}/{count}"
                origin = f"--from={mount.origin} " if mount.origin else ""
                source_path = mount.source or ("/" if mount.origin else ".")
                copies.append(f"COPY {origin}{source_path} {staged}")
                setup.append(f"cp -a {staged} {target}")
                cleanup.append(f"rm -rf {staged}")
            elif mount.kind in ("cache", "tmpfs"):
                setup.append(f"mkdir -p {target}")
            else:
                warnings.append(
                    f"{where}: line {line}: RUN --mount=type={mount.kind} cannot be given "
                    "offline by the classic builder; the command runs without it"
                )
                setup.append(f"mkdir -p {target}")
            cleanup.append(f"rm -rf {target}")
            cleanup.append(f"if [ -e {aside} ] || [ -L {aside} ]; then mv {aside} {target}; fi")
        lines = wrapped_run(text, script, str(line), setup, cleanup)
        source.splice(inst.first, inst.last, [*copies, *lines])
        kinds = ", ".join(sorted({f"type={m.kind}" for m in mounts}) or {"--network"})
        warnings.append(
            f"{where}: line {line}: RUN with {kinds} rewritten for the classic builder "
            "(bind sources copied in, caches as empty directories)"
        )
    return list(reversed(warnings))
