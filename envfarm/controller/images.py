"""A worker's images: each task's image built once per content hash, concurrently but bounded.

Episodes of a task are leased only once its image is settled, so no episode slot waits on a
build. A build that fails for a bad input (an unknown base image) settles at once: the task's
groups fail with the reason. One the task's Dockerfile causes (``TaskBuildError``: a missing
``COPY`` source, a ``RUN`` that failed the same way twice) also settles at once, and its
episodes end with it as their result: invalid, the task's fault, never an infrastructure
error. A build that fails for an infrastructure reason (the engine, the package mirror) is
tried again, ``BUILD_RETRY_S`` apart, up to ``BUILD_ATTEMPTS`` times; its episodes stay queued
meanwhile (for this worker or another), and only after the last attempt do they run, ending at
once with the build error as their (invalid) result. Each image is built for its task's plan
(``planning.py``), so a task the chosen runtime cannot run is refused here, as bad input,
before anything is built.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from envfarm.controller.planning import Planner
from envfarm.errors import EnvfarmError, ImageError, TaskBuildError
from envfarm.sandbox.base import PreparedImage
from envfarm.spec.task import Task

log = logging.getLogger(__name__)
BUILD_ATTEMPTS = 3
BUILD_RETRY_S = 20.0

ImageEvent = Callable[[Task, PreparedImage | None, EnvfarmError | None], None]


def bad_input(error: EnvfarmError | None) -> bool:
    """A build error after which the task's groups fail without running an episode."""
    return error is not None and not error.infrastructure and not isinstance(error, TaskBuildError)


@dataclass
class _Failure:
    error: EnvfarmError
    count: int
    at: float


class ImageBuilds:
    def __init__(
        self,
        planner: Planner,
        concurrency: int,
        on_image: ImageEvent,
        on_bad_task: Callable[[Task, EnvfarmError], Awaitable[None]],
        on_settled: Callable[[], None],
        retry_s: float = BUILD_RETRY_S,
    ) -> None:
        self.planner, self.on_image, self.retry_s = planner, on_image, retry_s
        self.on_bad_task, self.on_settled = on_bad_task, on_settled
        self._slots = asyncio.Semaphore(concurrency)
        self._settled: dict[str, tuple[PreparedImage | None, EnvfarmError | None]] = {}
        self._failures: dict[str, _Failure] = {}
        self._builds: dict[str, asyncio.Task[None]] = {}

    def want(self, task: Task) -> None:
        """Start building ``task``'s image unless it is settled, building or waiting to retry."""
        key = task.content_hash
        if key in self._settled or key in self._builds:
            return
        failure = self._failures.get(key)
        if failure is not None and time.monotonic() - failure.at < self.retry_s:
            return
        self._builds[key] = asyncio.create_task(self._build(task))

    def ready(self) -> list[str]:
        """Content hashes whose episodes may run."""
        return list(self._settled)

    async def wait(self, task: Task) -> tuple[PreparedImage | None, EnvfarmError | None]:
        """``task``'s image once it is settled, building it first if need be."""
        key = task.content_hash
        while key not in self._settled:
            self.want(task)
            build = self._builds.get(key)
            if build is not None:
                await asyncio.shield(build)
            else:  # a failed build waits out its retry delay
                await asyncio.sleep(min(self.retry_s, 1.0))
        return self._settled[key]

    def get(self, task_hash: str) -> tuple[PreparedImage | None, EnvfarmError | None]:
        return self._settled[task_hash]

    async def _build(self, task: Task) -> None:
        key = task.content_hash
        try:
            async with self._slots:
                plan = await self.planner.plan(task)  # a task the runtime cannot run: bad
                image = await self.planner.backend.prepare(plan.sandbox)
        except Exception as raw:
            error = raw if isinstance(raw, EnvfarmError) else ImageError(f"{task.id}: {raw}")
            await self._failed(task, error)
        else:
            self._failures.pop(key, None)
            self._settled[key] = (image, None)
            self.on_image(task, image, None)
        finally:
            self._builds.pop(key, None)
            self.on_settled()

    async def _failed(self, task: Task, error: EnvfarmError) -> None:
        key = task.content_hash
        if isinstance(error, TaskBuildError):
            self._settled[key] = (None, error)
            self.on_image(task, None, error)
            return
        if bad_input(error):
            self._settled[key] = (None, error)
            self.on_image(task, None, error)
            await self.on_bad_task(task, error)
            return
        previous = self._failures.get(key)
        count = (previous.count if previous else 0) + 1
        self._failures[key] = _Failure(error, count, time.monotonic())
        if count >= BUILD_ATTEMPTS:
            self._settled[key] = (None, error)
            self.on_image(task, None, error)
        else:
            log.warning("image of %s failed (attempt %d of %d, retrying): %s",
                        task.id, count, BUILD_ATTEMPTS, error)  # fmt: skip

    async def close(self) -> None:
        builds = list(self._builds.values())
        for build in builds:
            build.cancel()
        await asyncio.gather(*builds, return_exceptions=True)
