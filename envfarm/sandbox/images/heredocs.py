"""``RUN`` heredocs for the engine's classic builder, run as BuildKit runs them.

The classic builder reads a heredoc's body as instructions, so each ``RUN`` with heredocs is
rewritten to one line that runs what BuildKit would run:

- a ``RUN <<EOF`` whose command is the heredoc alone runs the body as a shell script (``<<-``
  strips leading tabs first); a body that starts with ``#!`` is written to a file and executed,
  so its interpreter runs it (``RUN <<EOF`` with ``#!/usr/bin/env python3``);
- any other (``RUN python3 - <<'EOF'``, ``cat <<EOF > file``) gives the shell the command line
  followed by each body and its terminator, so the shell does the heredoc, quoting and
  expansion included.

The text reaches the shell through ``eval`` of its base64 (``encoded``), so no quoting of the
author's can reach the wrapper. A text whose base64 would pass the kernel's limit on one
argument is first written to a file in pieces, one ``RUN`` each, and removed after use.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence

from envfarm.sandbox.images.dockerlines import Instruction

STAGING = "/.envfarm-heredoc"
CHUNK = 100_000
"""Base64 characters per line: well under the kernel's 128 KiB limit on one argument."""


def shell_text(inst: Instruction, command: str) -> tuple[str, bool] | None:
    """(the text the shell runs, whether it is a ``#!`` script to execute) for a ``RUN`` with
    heredocs; ``command`` is its command line without flags. None without heredocs."""
    if not inst.heredocs or command.startswith("["):
        return None
    only = inst.heredocs[0]
    alone = r"\d*<<-?['\"]?" + re.escape(only.name) + r"['\"]?"
    if len(inst.heredocs) == 1 and re.fullmatch(alone, command):
        body = only.body
        if only.chomp:
            body = "".join(line.lstrip("\t") for line in body.splitlines(keepends=True))
        return body, body.startswith("#!")
    full = command + "".join(f"\n{heredoc.body}{heredoc.name}" for heredoc in inst.heredocs)
    return full, False


def encoded(text: str, key: str) -> tuple[list[str], str, str]:
    """(``RUN`` lines to put before, a shell expression printing ``text``, a cleanup command)."""
    data = base64.b64encode(text.encode()).decode()
    if len(data) <= CHUNK:
        return [], f"echo {data} | base64 -d", ""
    path = f"{STAGING}-{key}.b64"
    before = [f"RUN echo {data[i : i + CHUNK]} >> {path}" for i in range(0, len(data), CHUNK)]
    return before, f"base64 -d {path}", f"rm -f {path}"


def wrapped_run(
    text: str, script: bool, key: str, setup: Sequence[str] = (), cleanup: Sequence[str] = ()
) -> list[str]:
    """The classic builder's lines for a ``RUN`` whose shell text is ``text`` (``script``: a
    ``#!`` file to execute), between the wrapper's own ``setup`` and ``cleanup`` commands; the
    ``RUN`` exits with the text's status."""
    before, printed, unstage = encoded(text, key)
    if script:
        path = f"{STAGING}-{key}"
        run = [f"{printed} > {path}", f"chmod 755 {path}", path]
        cleanup = [f"rm -f {path}", *cleanup]
    else:
        run = [f'eval "$({printed})"']
    steps = [*setup, *run, "envfarm_status=$?", *cleanup, unstage]
    return [*before, "RUN " + "; ".join(filter(None, steps)) + "; exit $envfarm_status"]
