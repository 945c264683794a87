"""One ``docker build`` through the SDK, with output streaming, a deadline and the error tail;
the lock that makes concurrent callers (coroutines or processes) build a tag once; and what a
build (or finding it built) yields, ``BuiltImage``.

The SDK call blocks, so it runs in a worker thread. The deadline is enforced three ways: the
caller stops waiting after it (plus a grace period), the thread stops reading at the first
output line past it, and the HTTP read timeout ends a build that has been silent that long.
Stopping the read closes the connection, which makes the engine cancel the build.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import hashlib
import os
import re
import tempfile
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import IO

import docker.errors
import requests
import urllib3.exceptions
from pydantic import BaseModel, ConfigDict

from envfarm.errors import ImageError
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.images.context import context_archive
from envfarm.sandbox.docker.images.failures import build_failure, step_line

TAIL_LINES = 30
GRACE_S = 30.0

LOCK_DIR = Path(tempfile.gettempdir()) / "envfarm-image-locks"

LogFn = Callable[[str], None]

_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


class BuildSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    where: str
    """Names what is built in errors (a task and its Dockerfile, a recipe)."""
    context: Path
    dockerfile: Path
    """May lie outside ``context``."""
    tag: str
    labels: dict[str, str]
    buildargs: dict[str, str]
    timeout: float
    target: str | None = None
    """The stage to build, of a multi-stage Dockerfile."""
    steps: list[str] = []
    """The task's own instruction behind each step the engine numbers (``failures.py``)."""
    notes: list[str] = []
    """Lines every error adds after its first (the substitutions that applied)."""
    mirrors: set[str] = set()
    """The machine's package mirrors: a ``RUN`` failing on one may pass when tried again."""


class BuiltImage(BaseModel):
    """An image built, or found already built (``cached``)."""

    model_config = ConfigDict(extra="forbid")

    tag: str
    image_id: str
    build_s: float
    cached: bool
    warnings: list[str] = []


def since(start: float) -> float:
    """Seconds from ``start`` (``time.monotonic``) to now, to the millisecond: a ``build_s``."""
    return round(time.monotonic() - start, 3)


def threadsafe_log(on_log: LogFn | None) -> LogFn:
    """A callback for worker threads that runs ``on_log`` on the current event loop."""
    if on_log is None:
        return lambda _line: None
    loop = asyncio.get_running_loop()
    callback = on_log

    def log(line: str) -> None:
        loop.call_soon_threadsafe(callback, line)

    return log


@contextlib.asynccontextmanager
async def exclusive(tag: str) -> AsyncIterator[None]:
    """Hold while checking for and building ``tag``: one builder per event loop (a lock) and
    per machine and engine (an flock on a file named after the tag and DOCKER_HOST, polled so
    cancellation is clean)."""
    per_loop = _locks.setdefault(asyncio.get_running_loop(), {})
    async with per_loop.setdefault(tag, asyncio.Lock()):
        LOCK_DIR.mkdir(exist_ok=True)
        engine = hashlib.sha256(os.environ.get("DOCKER_HOST", "").encode()).hexdigest()[:8]
        path = LOCK_DIR / (re.sub(r"[^\w.-]", "_", tag) + f".{engine}.lock")  # per engine
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    await asyncio.sleep(0.5)
            yield
        finally:
            os.close(fd)


async def run_build(spec: BuildSpec, on_log: LogFn | None) -> str:
    """Build and tag ``spec.tag``; return the image id or raise ``ImageError``."""
    cancelled = threading.Event()
    log = threadsafe_log(on_log)
    try:
        async with asyncio.timeout(spec.timeout + GRACE_S):
            return await asyncio.to_thread(_build_blocking, spec, log, cancelled)
    except TimeoutError:
        message = f"{spec.where}: build did not finish within {spec.timeout:.0f} s"
        raise ImageError(message) from None
    finally:
        cancelled.set()


def _build_blocking(spec: BuildSpec, log: LogFn, cancelled: threading.Event) -> str:
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    deadline = time.monotonic() + spec.timeout
    too_long = f"build did not finish within {spec.timeout:.0f} s"
    error: str | None = None
    step: str | None = None
    client = docker_client()
    stream = None
    with contextlib.ExitStack() as stack:
        try:
            path: str | None = str(spec.context)
            archive: IO[bytes] | None = None
            name = str(spec.dockerfile)
            if not spec.dockerfile.is_relative_to(spec.context):
                archive, name = context_archive(spec.context, spec.dockerfile.read_text())
                stack.callback(archive.close)
                path = None
            stream = client.api.build(
                path=path,
                fileobj=archive,
                custom_context=archive is not None,
                dockerfile=name,
                tag=spec.tag,
                labels=spec.labels,
                buildargs=spec.buildargs,
                target=spec.target,
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
                timeout=int(spec.timeout) + 1,
            )
            for chunk in stream:
                for line in str(chunk.get("stream", "")).splitlines():
                    if not line.strip():
                        continue
                    number, line = step_line(line, spec.steps)
                    if number is not None:
                        step = line.partition(" : ")[2] if number <= len(spec.steps) else None
                    tail.append(line)
                    log(line)
                if "error" in chunk or "message" in chunk:
                    error = str(chunk.get("error") or chunk.get("message")).strip()
                if cancelled.is_set() or time.monotonic() > deadline:
                    error, step = too_long, None
                    break
        except (urllib3.exceptions.ReadTimeoutError, requests.exceptions.ReadTimeout):
            error, step = too_long, None
        except (
            OSError,
            docker.errors.DockerException,
            requests.RequestException,
            urllib3.exceptions.HTTPError,
        ) as exc:
            error, step = f"{type(exc).__name__}: {exc}", None
        finally:
            if stream is not None:
                stream.close()
    if error is not None:
        raise build_failure(spec.where, error, step, spec.notes, list(tail), spec.mirrors)
    image_id = client.images.get(spec.tag).id
    return str(image_id)
