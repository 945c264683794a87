"""A simulated kubelet for the in-memory API: pods go Pending -> Running -> ready, and end.

For every pod created it binds the pod to its node, starts it through a ``ContainerRuntime``
(by default nothing runs), reports Running with container statuses, then probes readiness:
a container with a ``readinessProbe`` is ready when the ``readiness`` hook says so (tests
decide), one without is ready once running. Probes repeat every ``probe_period_s`` until the
pod is ready. ``activeDeadlineSeconds`` (times ``time_scale``) fails the pod with reason
``DeadlineExceeded``. Deleting a running pod is graceful: the pod is marked, the runtime
stopped, its containers reported terminated, then the pod object deleted (grace 0), as the
real kubelet does. ``attach`` hands the runtime's stream for a running container.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from envfarm.errors import KubeInvalid
from envfarm.k8s.api import PODS, KubeObject, PodStream
from envfarm.k8s.objects import deep_copy, meta, now_rfc3339, uid_of
from envfarm.testing.k8s.kubelet_status import failed_status, running_status, terminated_status

if TYPE_CHECKING:
    from envfarm.testing.k8s.memory_store import ObjectStore

ReadinessHook = Callable[[KubeObject, str], bool | Awaitable[bool]]
"""(pod, container name) -> is the container ready now?"""


class ContainerRuntime(Protocol):
    """What runs a pod's containers in the simulation (say, a fake sandbox per pod)."""

    async def start(self, pod: KubeObject) -> None: ...

    async def attach(
        self, pod: KubeObject, container: str, command: list[str] | None
    ) -> PodStream: ...

    async def stop(self, pod: KubeObject) -> None: ...


class NoRuntime:
    """Runs nothing; attach is refused."""

    async def start(self, pod: KubeObject) -> None:
        return None

    async def attach(self, pod: KubeObject, container: str, command: list[str] | None) -> PodStream:
        raise KubeInvalid("this simulated node runs no containers to attach to", status=400)

    async def stop(self, pod: KubeObject) -> None:
        return None


def _terminal(pod: KubeObject) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


class SimulatedKubelet:
    def __init__(
        self,
        api: ObjectStore,
        *,
        readiness: ReadinessHook | None = None,
        runtime: ContainerRuntime | None = None,
        start_delay_s: float = 0.0,
        probe_period_s: float = 0.05,
        time_scale: float = 1.0,
        node_name: str = "memory-node",
    ) -> None:
        self.api = api
        self.readiness = readiness
        self.runtime: ContainerRuntime = runtime or NoRuntime()
        self.start_delay_s = start_delay_s
        self.probe_period_s = probe_period_s
        self.time_scale = time_scale
        self.node_name = node_name
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stopping: dict[str, asyncio.Event] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._ips = itertools.count(1)
        api.kubelet = self

    # -- called by the API, synchronously, on pod writes

    def observe(self, pod: KubeObject) -> None:
        uid = uid_of(pod)
        if uid not in self._tasks and not _terminal(pod):
            ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
            self._stopping[uid] = asyncio.Event()
            self._wake[uid] = asyncio.Event()
            self._tasks[uid] = asyncio.get_running_loop().create_task(
                self._run(uid, ns, name), name=f"kubelet {ns}/{name}"
            )
        elif pod["metadata"].get("deletionTimestamp") and uid in self._stopping:
            self._stopping[uid].set()

    def forget(self, pod: KubeObject) -> None:
        uid = uid_of(pod)
        if uid in self._stopping:
            self._stopping[uid].set()

    def graceful_delete(self, pod: KubeObject, grace: int | None) -> KubeObject | None:
        """Mark a running pod for deletion (the kubelet then stops and deletes it); None when
        it can be deleted at once (never bound to this node, or already finished)."""
        if not (pod.get("spec") or {}).get("nodeName") or _terminal(pod):
            return None
        if pod["metadata"].get("deletionTimestamp"):
            return pod
        new = deep_copy(pod)
        default = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
        meta(new)["deletionTimestamp"] = now_rfc3339()
        meta(new)["deletionGracePeriodSeconds"] = default if grace is None else grace
        return self.api.commit_update(PODS, pod, new)

    # -- test controls

    def probe_now(self) -> None:
        """Probe every pod's readiness now (say, after the hook's answer changed)."""
        for event in self._wake.values():
            event.set()

    async def terminate_container(
        self,
        namespace: str,
        name: str,
        container: str,
        *,
        exit_code: int = 1,
        reason: str = "Error",
    ) -> None:
        """Make ``container`` exit, as a crash or the OOM killer would (reason OOMKilled)."""
        pod = self.api.lookup(PODS, namespace, name)
        self._set_status(pod, terminated_status(pod, {container: (exit_code, reason)}))

    async def attach(self, pod: KubeObject, container: str, command: list[str] | None) -> PodStream:
        status = pod.get("status") or {}
        states = {s["name"]: s.get("state", {}) for s in status.get("containerStatuses", [])}
        if status.get("phase") != "Running" or "running" not in states.get(container, {}):
            raise KubeInvalid(
                f"container {container} of pod {pod['metadata']['name']} is not running "
                f"(phase {status.get('phase')})",
                status=400,
            )
        return await self.runtime.attach(deep_copy(pod), container, command)

    async def stop(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()

    # -- the pod's life

    def _current(self, uid: str, namespace: str, name: str) -> KubeObject | None:
        pod = self.api.find((PODS.key, namespace, name))
        return pod if pod is not None and uid_of(pod) == uid else None

    def _set_status(self, pod: KubeObject, status: dict[str, Any], **spec: Any) -> None:
        new = deep_copy(pod)
        new["status"] = status
        new.setdefault("spec", {}).update(spec)
        self.api.commit_update(PODS, pod, new)

    async def _run(self, uid: str, namespace: str, name: str) -> None:
        stopping = self._stopping[uid]
        try:
            await self._live(uid, namespace, name)
            await self._stop_runtime(uid, namespace, name)
            await stopping.wait()
            pod = self._current(uid, namespace, name)
            if pod is not None and pod["metadata"].get("deletionTimestamp"):
                self.api.delete_now(PODS, pod, "Background")
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await self.runtime.stop({"metadata": {"uid": uid}})
            raise
        finally:
            self._tasks.pop(uid, None)
            self._stopping.pop(uid, None)
            self._wake.pop(uid, None)

    async def _live(self, uid: str, namespace: str, name: str) -> None:
        """Schedule, start and probe the pod until it is deleted, fails or ends."""
        await asyncio.sleep(0)
        pod = self._current(uid, namespace, name)
        if pod is None or self._stopping[uid].is_set():
            return
        scheduled = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
        self._set_status(pod, scheduled, nodeName=self.node_name)
        if self.start_delay_s:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.start_delay_s):
                    await self._stopping[uid].wait()
        pod = self._current(uid, namespace, name)
        if pod is None or self._stopping[uid].is_set():
            return
        try:
            await self.runtime.start(deep_copy(pod))
        except Exception as exc:  # a runtime that cannot start fails the pod
            if (pod := self._current(uid, namespace, name)) is not None:
                self._set_status(pod, failed_status(pod, "StartError", str(exc)))
            return
        pod = self._current(uid, namespace, name)
        if pod is None:
            return
        self._set_status(pod, running_status(pod, {}, self._next_ip))
        await self._probe_until_stopped(uid, namespace, name)

    async def _stop_runtime(self, uid: str, namespace: str, name: str) -> None:
        pod = self._current(uid, namespace, name)
        with contextlib.suppress(Exception):
            await self.runtime.stop(deep_copy(pod) if pod else {"metadata": {"uid": uid}})
        pod = self._current(uid, namespace, name)
        if pod is not None and not _terminal(pod):
            self._set_status(pod, terminated_status(pod, None))

    async def _probe_until_stopped(self, uid: str, namespace: str, name: str) -> None:
        stopping, wake = self._stopping[uid], self._wake[uid]
        pod = self._current(uid, namespace, name)
        assert pod is not None
        deadline_s = (pod.get("spec") or {}).get("activeDeadlineSeconds")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + deadline_s * self.time_scale if deadline_s else None
        while not stopping.is_set():
            pod = self._current(uid, namespace, name)
            if pod is None or _terminal(pod):
                return
            if deadline is not None and loop.time() >= deadline:
                self._set_status(pod, failed_status(pod, "DeadlineExceeded", "active deadline"))
                return
            ready = await self._probe(pod)
            pod = self._current(uid, namespace, name)
            if pod is None:
                return
            self._set_status(pod, running_status(pod, ready, self._next_ip))
            wait = None if all(ready.values()) else self.probe_period_s
            if deadline is not None:
                left = max(deadline - loop.time(), 0.0)
                wait = left if wait is None else min(wait, left)
            wake.clear()
            waiters = [asyncio.ensure_future(stopping.wait()), asyncio.ensure_future(wake.wait())]
            await asyncio.wait(waiters, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            for waiter in waiters:
                waiter.cancel()

    async def _probe(self, pod: KubeObject) -> dict[str, bool]:
        ready = {}
        for container in pod["spec"]["containers"]:
            if "readinessProbe" not in container or self.readiness is None:
                ready[container["name"]] = True
                continue
            answer = self.readiness(deep_copy(pod), container["name"])
            ready[container["name"]] = bool(await answer if inspect.isawaitable(answer) else answer)
        return ready

    # -- status shapes

    def _next_ip(self) -> str:
        number = next(self._ips)
        return f"10.1.{number // 250}.{number % 250 + 1}"
