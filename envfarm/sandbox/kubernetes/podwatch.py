"""Pod readiness from one watch per backend, fanned out to the sandboxes waiting on it.

A thousand environments starting at once must not mean a thousand watches or a thousand pollers:
``PodWatch`` runs one ``Informer`` over the namespace's envfarm pods and hands each change of a
pod to the waiters registered for that pod's name. ``wait(name, verdict)`` resolves with the
first non-None answer of ``verdict(pod)`` (``pod`` None once the pod is deleted); a verdict may
raise to fail the wait. A pod the watch has not seen yet is not taken for deleted.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from typing import Any, TypeVar

from envfarm.k8s.api import PODS, EventType, KubeApi, KubeObject
from envfarm.k8s.informer import Informer

T = TypeVar("T")
Verdict = Callable[[KubeObject | None], Any]
_GONE_KEPT = 10_000


class _Waiter:
    __slots__ = ("future", "verdict")

    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict
        self.future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def offer(self, pod: KubeObject | None) -> None:
        if self.future.done():
            return
        try:
            answer = self.verdict(pod)
        except Exception as exc:
            self.future.set_exception(exc)
            return
        if answer is not None:
            self.future.set_result(answer)


class PodWatch:
    def __init__(self, api: KubeApi, namespace: str, label_selector: str) -> None:
        self.informer = Informer(api, PODS, namespace, label_selector=label_selector)
        self.informer.handlers.append(self._changed)
        self._waiters: dict[str, set[_Waiter]] = defaultdict(set)
        self._gone: OrderedDict[str, None] = OrderedDict()

    def _changed(self, kind: EventType, pod: KubeObject) -> None:
        name = pod["metadata"]["name"]
        if kind == "DELETED":
            self._gone[name] = None
            while len(self._gone) > _GONE_KEPT:
                self._gone.popitem(last=False)
        for waiter in list(self._waiters.get(name, ())):
            waiter.offer(None if kind == "DELETED" else pod)

    def current(self, namespace: str, name: str) -> KubeObject | None:
        return self.informer.cache.get((namespace, name))

    async def wait(self, namespace: str, name: str, verdict: Verdict, timeout: float | None) -> Any:
        """The first answer of ``verdict``; TimeoutError after ``timeout`` seconds."""
        self.informer.start()
        waiter = _Waiter(verdict)
        self._waiters[name].add(waiter)
        try:
            async with asyncio.timeout(timeout):
                await self.informer.synced.wait()
                pod = self.current(namespace, name)
                if pod is not None:
                    waiter.offer(pod)
                elif name in self._gone:
                    waiter.offer(None)
                return await waiter.future
        finally:
            self._waiters[name].discard(waiter)
            if not self._waiters[name]:
                del self._waiters[name]

    async def close(self) -> None:
        await self.informer.stop()
