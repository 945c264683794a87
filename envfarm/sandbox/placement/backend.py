"""One worker's sandboxes spread over several backends (Docker hosts, Kubernetes clusters).

``PlacedBackend`` is a ``SandboxBackend`` made of named backends, each with a quota; give it to
the ``Worker`` (and the ``EpisodeRunner``) in place of one backend. Every sandbox is placed when
it starts, by ``envfarm.sandbox.placement.placer.Placer``: the healthy backend with the most free
share of its quota, with a bonus where the episode's image already is. When every backend is
full, a start waits for a slot. A backend gets a task's image on its first sandbox of that task
(``prepare`` there, once), so locality is real: later episodes of the task prefer it.

``lose(name)`` takes a whole backend out of service (its API is gone, the cluster is lost;
declared by a health check or an operator, ``watch`` runs one). Every sandbox placed there
fails at once with ``SandboxGone`` naming the backend, even one whose call was hanging: the
episode is an infrastructure failure, so the Worker records the attempt as lost and returns
the episode to the queue, and its next attempt is placed on a backend still in service.
``restore(name)`` brings a backend back. docs/scale.md has the design and its limits.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from envfarm.errors import SandboxError, SandboxGone
from envfarm.plan.models import EngineFacts, SandboxSpec
from envfarm.sandbox.base import (
    ExecResult,
    PreparedImage,
    ProcessLogs,
    Sandbox,
    SandboxBackend,
    VerifierImage,
    VerifierPhases,
    verifier_phases,
)
from envfarm.sandbox.placement.placer import Placer, Slot

T = TypeVar("T")
LOST_STOP_S = 10.0
"""How long the teardown of a sandbox on a lost backend may take before it is abandoned."""


class PlacedBackend(SandboxBackend):
    def __init__(self, backends: Mapping[str, tuple[SandboxBackend, int]]) -> None:
        """``backends``: name -> (backend, quota: sandboxes it may hold at once)."""
        self.placer: Placer[SandboxBackend] = Placer(
            [Slot(name, backend, quota) for name, (backend, quota) in backends.items()]
        )
        self.name = "+".join(backends)
        self._images: dict[tuple[str, str], asyncio.Future[PreparedImage]] = {}
        self._sandboxes: dict[str, set[PlacedSandbox]] = {name: set() for name in backends}
        self._freed = asyncio.Event()

    async def facts(self) -> EngineFacts:
        """The first backend's: a plan holds on every backend of one kind."""
        first = next(iter(self.placer.slots.values()))
        return await first.handle.facts()

    async def prepare(self, spec: SandboxSpec) -> PreparedImage:
        """The image on the backend with the most room (others get it on first use)."""
        healthy = [slot for slot in self.placer.slots.values() if slot.healthy]
        if not healthy:
            raise SandboxError(f"every backend of {self.name} is out of service")
        return await self._image_on(max(healthy, key=lambda s: s.free / s.quota), spec)

    def create(self, spec: SandboxSpec, image: PreparedImage, *, run_id: str) -> Sandbox:
        return PlacedSandbox(self, spec, image, run_id)

    async def reap(self) -> list[str]:
        reaped: list[str] = []
        for slot in self.placer.slots.values():
            if slot.healthy:
                reaped += await slot.handle.reap()
        return reaped

    def lose(self, name: str, reason: str | None = None) -> int:
        """Take backend ``name`` out of service; how many sandboxes it held (they fail now)."""
        self.placer.lose(name)
        self._images = {key: image for key, image in self._images.items() if key[0] != name}
        held = self._sandboxes[name]
        self._sandboxes[name] = set()
        for sandbox in held:
            sandbox.backend_lost(reason or f"backend {name} was lost")
        self._wake()
        return len(held)

    def restore(self, name: str) -> None:
        self.placer.restore(name)
        self._wake()

    async def watch(
        self, healthy: Callable[[str, SandboxBackend], Awaitable[bool]], interval_s: float = 10.0
    ) -> None:
        """Ask ``healthy`` about each backend in service every ``interval_s``; lose the ones
        it answers False (or raises) for. Runs until cancelled."""
        while True:
            for name, slot in list(self.placer.slots.items()):
                if not slot.healthy:
                    continue
                try:
                    ok = await healthy(name, slot.handle)
                except Exception:
                    ok = False
                if not ok:
                    self.lose(name, f"backend {name} failed its health check")
            await asyncio.sleep(interval_s)

    def _wake(self) -> None:
        self._freed.set()
        self._freed = asyncio.Event()

    async def _acquire(self, sandbox: PlacedSandbox, image: str) -> Slot[SandboxBackend]:
        while True:
            slot = self.placer.place(sandbox, image)
            if slot is not None:
                self._sandboxes[slot.name].add(sandbox)
                return slot
            if not any(s.healthy for s in self.placer.slots.values()):
                raise SandboxError(f"every backend of {self.name} is out of service")
            await self._freed.wait()

    def _release(self, sandbox: PlacedSandbox, slot: Slot[SandboxBackend]) -> None:
        if sandbox in self._sandboxes[slot.name]:
            self._sandboxes[slot.name].discard(sandbox)
            self.placer.release(sandbox)
            self._wake()

    async def _image_on(self, slot: Slot[SandboxBackend], spec: SandboxSpec) -> PreparedImage:
        key = (slot.name, spec.environment.task_hash)
        if key not in self._images:
            self._images[key] = asyncio.ensure_future(slot.handle.prepare(spec))
        try:
            return await asyncio.shield(self._images[key])
        except BaseException:
            if self._images.get(key) is not None and self._images[key].done():
                self._images.pop(key, None)  # a failed build is tried again next time
            raise


class PlacedSandbox(Sandbox, VerifierPhases, ProcessLogs):
    """A sandbox on whichever backend the placer chose; fails at once if that one is lost."""

    def __init__(
        self, owner: PlacedBackend, spec: SandboxSpec, image: PreparedImage, run_id: str
    ) -> None:
        self.id = f"placed-{uuid.uuid4().hex[:12]}"
        self._owner, self._spec, self._image, self._run_id = owner, spec, image, run_id
        self._inner: Sandbox | None = None
        self._slot: Slot[SandboxBackend] | None = None
        self._lost = asyncio.Event()
        self._reason = ""

    @property
    def backend_name(self) -> str | None:
        return self._slot.name if self._slot is not None else None

    def backend_lost(self, reason: str) -> None:
        self._reason = reason
        self._lost.set()

    async def _guard(self, call: Awaitable[T]) -> T:
        if self._lost.is_set():
            if asyncio.iscoroutine(call):
                call.close()
            raise SandboxGone(self._reason)
        work = asyncio.ensure_future(call)
        lost = asyncio.ensure_future(self._lost.wait())
        try:
            await asyncio.wait({work, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
        if work.done():
            return work.result()
        work.cancel()
        with contextlib.suppress(BaseException):
            await work
        raise SandboxGone(self._reason)

    def _sandbox(self) -> Sandbox:
        if self._inner is None:
            raise SandboxGone(self._reason or f"sandbox {self.id} was never started")
        return self._inner

    async def start(self) -> None:
        slot = await self._owner._acquire(self, self._image.tag)
        self._slot = slot
        try:
            image = await self._guard(self._owner._image_on(slot, self._spec))
            self._inner = slot.handle.create(self._spec, image, run_id=self._run_id)
            await self._guard(self._inner.start())
        except BaseException:
            if self._inner is not None:
                with contextlib.suppress(Exception, TimeoutError):
                    async with asyncio.timeout(LOST_STOP_S):
                        await self._inner.stop()
            self._owner._release(self, slot)
            raise
        self._owner.placer.started(self, self._image.tag)

    async def exec(self, command: str, **options: Any) -> ExecResult:
        return await self._guard(self._sandbox().exec(command, **options))

    async def read_file(self, path: str, *, user: str | None = None) -> bytes:
        return await self._guard(self._sandbox().read_file(path, user=user))

    async def write_file(
        self, path: str, data: bytes, mode: int = 0o644, *, user: str | None = None
    ) -> None:
        await self._guard(self._sandbox().write_file(path, data, mode, user=user))

    @property
    def default_user(self) -> str | None:
        return self._inner.default_user if self._inner is not None else None

    async def enter_verifier_phase(self, *, network: bool) -> None:
        phases = verifier_phases(self._sandbox())
        await self._guard(phases.enter_verifier_phase(network=network))

    async def prepare_fresh_verifier(self, *, network: bool) -> None:
        inner = self._sandbox()
        if isinstance(inner, VerifierPhases):
            await self._guard(inner.prepare_fresh_verifier(network=network))

    async def fresh_verifier(self, *, network: bool, image: VerifierImage | None = None) -> Sandbox:
        inner = verifier_phases(self._sandbox())
        return await self._guard(inner.fresh_verifier(network=network, image=image))

    async def process_logs(self) -> dict[str, bytes]:
        inner = self._inner
        if not isinstance(inner, ProcessLogs) or self._lost.is_set():
            return {}
        return await inner.process_logs()

    async def _teardown(self) -> None:
        try:
            if self._inner is not None:
                if self._lost.is_set():  # a lost backend may never answer
                    with contextlib.suppress(Exception, TimeoutError):
                        async with asyncio.timeout(LOST_STOP_S):
                            await self._inner.stop()
                else:
                    await self._inner.stop()
        finally:
            if self._slot is not None:
                self._owner._release(self, self._slot)
