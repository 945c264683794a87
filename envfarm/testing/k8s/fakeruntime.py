"""A container runtime for the simulated kubelet: each pod's main container is a ``FakeSandbox``
behind the in-process helper, so the Kubernetes backend runs end to end without a cluster.

``FakePodRuntime`` plugs into ``kubelet.SimulatedKubelet``: ``start`` makes the pod's
sandbox (``sandbox_factory``, by default a ``FakeSandbox`` answering every command with an
empty success), ``attach`` to the main container (or an exec of the helper in it) returns a
stream to a ``HelperEmulator`` over that sandbox, and ``stop`` ends the sandbox and every stream
to it, as a container's death ends its attach sessions.
"""

from __future__ import annotations

from collections.abc import Callable

from envfarm.errors import KubeInvalid
from envfarm.k8s.api import KubeObject, PodStream
from envfarm.k8s.objects import uid_of
from envfarm.sandbox.base import Sandbox
from envfarm.sandbox.kubernetes.podspec import MAIN_CONTAINER
from envfarm.testing.channel_emulator import HelperEmulator
from envfarm.testing.fake_sandbox import FakeSandbox

SandboxFactory = Callable[[KubeObject], Sandbox]


class FakePodRuntime:
    def __init__(self, sandbox_factory: SandboxFactory | None = None) -> None:
        self.sandbox_factory = sandbox_factory or (lambda pod: FakeSandbox())
        self.sandboxes: dict[str, Sandbox] = {}
        """Pod uid -> its main container's sandbox (for inspection by tests)."""
        self._streams: dict[str, list[HelperEmulator]] = {}
        self.attaches = 0

    async def start(self, pod: KubeObject) -> None:
        sandbox = self.sandbox_factory(pod)
        await sandbox.start()
        self.sandboxes[uid_of(pod)] = sandbox
        self._streams[uid_of(pod)] = []

    async def attach(self, pod: KubeObject, container: str, command: list[str] | None) -> PodStream:
        sandbox = self.sandboxes.get(uid_of(pod))
        if sandbox is None or container != MAIN_CONTAINER:
            raise KubeInvalid(f"container {container} runs no helper to attach to", status=400)
        self.attaches += 1
        helper = HelperEmulator(sandbox)
        self._streams[uid_of(pod)].append(helper)
        return helper.stream()

    async def stop(self, pod: KubeObject) -> None:
        uid = uid_of(pod)
        for helper in self._streams.pop(uid, []):
            await helper.close()
        sandbox = self.sandboxes.pop(uid, None)
        if sandbox is not None:
            await sandbox.stop()

    def sandbox_of(self, pod: KubeObject) -> Sandbox | None:
        return self.sandboxes.get(uid_of(pod))
