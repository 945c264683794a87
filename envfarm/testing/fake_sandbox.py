"""An in-memory sandbox for load simulation, dry runs and tests of the layers above sandboxes.

Nothing runs: files live in a dict, and ``exec`` answers from a handler (by default, a
successful empty result after an optional simulated latency). It lets the controller and the
agent loop be driven at thousands of concurrent sessions on one machine, which is what the
loop-overhead benchmark measures. Never use it to grade real work.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable

from envfarm.errors import EnvfarmError, SandboxError, SandboxGone
from envfarm.plan.models import EngineFacts, SandboxSpec
from envfarm.sandbox.base import (
    ExecResult,
    PreparedImage,
    Sandbox,
    SandboxBackend,
    VerifierImage,
    VerifierPhases,
)
from envfarm.sandbox.fork import Forking, WarmParent

ExecHandler = Callable[[str], Awaitable[ExecResult] | ExecResult]


def ok(stdout: str = "") -> ExecResult:
    return ExecResult(exit_code=0, stdout=stdout, stderr="")


class FakeSandbox(Sandbox, VerifierPhases):
    _ids = itertools.count()

    def __init__(
        self,
        handler: ExecHandler | None = None,
        *,
        latency_s: float = 0.0,
        start_error: EnvfarmError | None = None,
    ) -> None:
        self.id = f"fake-{next(self._ids)}"
        self.start_error = start_error
        self.files: dict[str, bytes] = {}
        self.commands: list[str] = []
        self.handler = handler
        self.latency_s = latency_s
        self.running = False
        self.factory: Callable[[], Sandbox] | None = None
        """Makes the sandbox ``fresh_verifier`` returns (the backend sets it)."""
        self.fresh_verifiers: list[Sandbox] = []
        self.network: bool | None = None
        """The network the verifier phase was given (None: no phase change yet)."""

    async def start(self) -> None:
        if self.start_error is not None:
            raise self.start_error
        self.running = True

    def _check(self) -> None:
        if not self.running:
            raise SandboxGone(f"fake sandbox {self.id} is not running")

    async def exec(
        self,
        command: str,
        *,
        timeout: float | None = None,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
    ) -> ExecResult:
        self._check()
        self.commands.append(command)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if self.handler is None:
            return ok()
        result = self.handler(command)
        return await result if isinstance(result, Awaitable) else result

    async def read_file(self, path: str, *, user: str | None = None) -> bytes:
        self._check()
        if path in self.files:
            return self.files[path]
        if any(name.startswith(path.rstrip("/") + "/") for name in self.files):
            raise IsADirectoryError(path)
        raise FileNotFoundError(path)

    async def write_file(
        self, path: str, data: bytes, mode: int = 0o644, *, user: str | None = None
    ) -> None:
        self._check()
        if not path.startswith("/"):
            raise OSError(f"sandbox paths must be absolute, got {path!r}")
        self.files[path] = data

    async def enter_verifier_phase(self, *, network: bool) -> None:
        self._check()
        self.network = network

    async def fresh_verifier(self, *, network: bool, image: VerifierImage | None = None) -> Sandbox:
        """A new sandbox from ``factory`` (its own empty files), started; this one stops."""
        self._check()
        if self.factory is None:
            raise SandboxError(f"fake sandbox {self.id} has no factory for a fresh verifier")
        self.running = False
        clean = self.factory()
        self.fresh_verifiers.append(clean)
        await clean.start()
        return clean

    async def _teardown(self) -> None:
        self.running = False
        for fresh in self.fresh_verifiers:
            await fresh.stop()


class FakeBackend(SandboxBackend):
    """Hands out ``FakeSandbox``es; ``created`` keeps them (fresh verifiers too) for inspection."""

    name = "fake"

    def __init__(self, handler: ExecHandler | None = None, *, latency_s: float = 0.0) -> None:
        self.handler, self.latency_s = handler, latency_s
        self.start_error: EnvfarmError | None = None
        """When set, every sandbox created from now on fails to start with it."""
        self.created: list[FakeSandbox] = []
        self.specs: list[SandboxSpec] = []
        """The plan's spec of each sandbox in ``created``."""

    async def prepare(self, spec: SandboxSpec) -> PreparedImage:
        env = spec.environment
        return PreparedImage(tag=f"fake/{env.task_id}", image_id=f"fake:{env.task_hash[:12]}")

    def create(self, spec: SandboxSpec, image: PreparedImage, *, run_id: str) -> Sandbox:
        sandbox = FakeSandbox(self.handler, latency_s=self.latency_s, start_error=self.start_error)
        sandbox.factory = lambda: self.create(spec, image, run_id=run_id)
        self.created.append(sandbox)
        self.specs.append(spec)
        return sandbox

    async def reap(self) -> list[str]:
        return []


class FakeWarmParent(WarmParent):
    """A warm parent whose copies are ``FakeSandbox``es of its backend, started; not frozen
    when its backend's ``warm_error`` is set (its copies then are cold ones)."""

    method = "fake"

    def __init__(self, backend: ForkingFakeBackend, spec: SandboxSpec, image: PreparedImage):
        self.backend, self.spec, self.image = backend, spec, image
        self.parent_id = f"warm-{len(backend.parents)}"
        self.image_id = image.image_id
        self.reason = None if backend.warm_error is None else str(backend.warm_error)
        self.closed = False

    async def frozen(self) -> str | None:
        return self.reason

    async def fork(self) -> Sandbox:
        sandbox = self.backend.create(self.spec, self.image, run_id="fork")
        await sandbox.start()
        return sandbox

    async def close(self) -> None:
        self.closed = True


class ForkingFakeBackend(FakeBackend, Forking):
    """A ``FakeBackend`` that forks every environment; ``warm_error``, when set, is why its
    warm parents are not frozen."""

    def __init__(self, handler: ExecHandler | None = None) -> None:
        super().__init__(handler)
        self.warm_error: EnvfarmError | None = None
        self.parents: list[FakeWarmParent] = []

    async def facts(self) -> EngineFacts:
        return EngineFacts(backend=self.name, fork_unsupported=None)

    def fork_unsupported(self, spec: SandboxSpec) -> str | None:
        return None

    def warm_parent(self, spec: SandboxSpec, image: PreparedImage, *, run_id: str) -> WarmParent:
        parent = FakeWarmParent(self, spec, image)
        self.parents.append(parent)
        return parent
