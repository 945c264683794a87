"""What a failed build says, and whose fault it is.

The classic builder numbers its steps (``Step 5/9 : RUN ...``) in the order of the Dockerfile it
was given, envfarm's rewrite; each step line is shown as the task's own line instead
(``Step 5/9 : line 7: RUN --mount=... pip install .``), and the error quotes that line, never
the rewrite.

Whose fault:

- the task's (``TaskBuildError``: bad input, never retried): what fails the same way whatever
  the machine's state, a Dockerfile the engine cannot parse, a ``COPY``/``ADD`` whose source is
  missing from the context or excluded by its ``.dockerignore``;
- perhaps the task's: a ``RUN`` (or an ``ADD`` of a URL) that failed. Its ``signature`` (the
  step and exit status) lets the caller build once more: the same failure twice is the task's (a
  package that does not exist, a host an offline machine cannot reach), another is not;
- infrastructure (``ImageError``, retried later): the engine failing or unreachable, a timeout,
  and a failed ``RUN`` whose output shows the machine's own package mirror or proxy timing out
  or refusing, which a retry can get past.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import urlsplit

from envfarm.errors import ImageError, TaskBuildError
from envfarm.sandbox.docker.images.hostconfig import HostConfig

_STEP = re.compile(r"^Step (\d+)/(\d+) : ")
_RUN_FAILED = re.compile(r"^The command '.*' returned a non-zero code: (\d+)$", re.DOTALL)
_TASK_ERRORS = re.compile(
    r"^(COPY|ADD) failed: (file not found|no source files|forbidden path|stat )"
    r"|dockerfile parse error|unknown instruction|[Uu]nknown flag|failed to process "
    r"|invalid reference format|failed to parse stage name|no build stage in current context"
    r"|invalid from flag value"
)
_TRANSIENT = re.compile(
    r"time(d)? ?out|Temporary failure|Connection (refused|reset|timed out)|Could not connect"
    r"|Unable to connect|Failed to connect|\b50[234]\b|Network is unreachable|Read timed out",
    re.IGNORECASE,
)


def step_line(line: str, steps: Sequence[str]) -> tuple[int | None, str]:
    """(the step number, ``line`` with the task's own instruction) for a ``Step n/m :`` line;
    (None, ``line``) for any other."""
    match = _STEP.match(line)
    if match is None:
        return None, line
    number = int(match.group(1))
    if 0 < number <= len(steps):
        return number, f"{match.group(0)}{steps[number - 1]}"
    return number, line


def mirror_hosts(host: HostConfig) -> set[str]:
    """The hosts of the machine's package mirrors and proxies, which builds inherit."""
    urls = [uri for source in host.apt_sources for uri in source.uris]
    urls += [value for key, value in host.pip.items() if key.endswith("index-url")]
    urls += [part for value in host.pip.values() for part in value.split() if "://" in part]
    urls += [value for key, value in host.npm.items() if "registry" in key or "proxy" in key]
    urls += list(host.proxy_env.values())
    return {name for url in urls if "://" in url and (name := urlsplit(url).hostname)}


def build_failure(
    where: str,
    error: str,
    step: str | None,
    notes: Sequence[str],
    tail: Sequence[str],
    mirrors: set[str],
) -> ImageError:
    """The error for a build that ended with the engine's ``error``; ``step`` quotes the task's
    line that failed, when known."""
    said = error
    run = _RUN_FAILED.match(error)
    if run is not None and step is not None:
        said = f"returned a non-zero code: {run.group(1)}"
    head = f"{where}: {step}: {said}" if step else f"{where}: image build failed: {said}"
    output = "\n".join(tail) or "(no output)"
    message = "\n".join([head, *notes, f"--- last {len(tail)} lines of build output ---", output])
    if _TASK_ERRORS.search(error) and "://" not in error:
        return TaskBuildError(message)
    failed = ImageError(message)
    if run is not None or error.startswith("ADD failed"):
        transient = [line for line in tail if _TRANSIENT.search(line)]
        if not any(mirror in line for line in transient for mirror in mirrors):
            failed.signature = f"{step or error}: {run.group(1) if run else error}"
    return failed
