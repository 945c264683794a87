"""The operator's work queue: watches feed it, workers run reconcilers, errors are sorted.

This is the documented equivalent of kopf that envfarm uses (kopf's handlers are
edge-triggered and pull in the ``kubernetes`` client; reconcilers here are level-based and
speak ``KubeApi``). One ``Controller`` per custom resource: an informer on the resource and on
the objects it owns (an EnvPool's pods, mapped back to the pool by a label) enqueues the
owner's key; ``workers`` tasks take keys and call ``reconcile(namespace, name)``.

* **Per-object serialization**: a key is never reconciled by two workers at once; a change
  seen while it runs marks it dirty and it runs again afterwards. Duplicate events collapse.
* **Temporary errors** (``EnvfarmError.retryable``: conflicts, an unreachable API server, a
  410) and unexpected exceptions retry with an exponential delay (``retry_delay_s`` doubling
  up to ``max_delay_s``, as kopf's ``TemporaryError(delay=...)``).
* **Permanent errors** (a bad task reference, an invalid object) are not retried: the object's
  ``Ready`` condition says ``False`` with the error's class as the reason and its message; the
  next change of the object tries again.
* ``resync_s`` re-enqueues every known object now and then, the safety net of level-based
  controllers.

Controllers: ``envpool_controller`` (``envpool.py``) and ``rolloutjob_controller``
(``rolloutjob.py``, which drives jobs through the controller API's client, not the store). A
reconcile may return a delay: the key runs again after it (a RolloutJob follows its job in the
API, which has no watch).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from envfarm.errors import EnvfarmError, KubeError
from envfarm.k8s.api import (
    ENV_POOLS,
    PODS,
    ROLLOUT_JOBS,
    KubeApi,
    KubeObject,
    ResourceLike,
    resolve,
)
from envfarm.k8s.informer import Informer
from envfarm.k8s.pools import POOL_LABEL
from envfarm.operator.conditions import set_condition
from envfarm.operator.envpool import EnvPoolReconciler
from envfarm.operator.rolloutjob import RolloutJobReconciler

log = logging.getLogger(__name__)

Reconcile = Callable[[str, str], Awaitable[float | None]]
"""(namespace, name) -> None, or the delay after which to reconcile the object again."""
OwnerOf = Callable[[KubeObject], str | None]
Key = tuple[int, str, str]
"""(controller index, namespace, name)."""


@dataclass
class Owned:
    resource: ResourceLike
    label_selector: str | None
    owner_of: OwnerOf
    """The name of the owning object, or None."""
    informer: Informer | None = None
    """An informer the reconciler reads too (its cache); None: the operator makes one."""


@dataclass
class Controller:
    resource: ResourceLike
    reconcile: Reconcile
    owned: list[Owned] = field(default_factory=list)


def envpool_controller(reconciler: EnvPoolReconciler) -> Controller:
    def pool_of(pod: KubeObject) -> str | None:
        return (pod["metadata"].get("labels") or {}).get(POOL_LABEL)

    shared = reconciler.pods.informer if reconciler.pods is not None else None
    return Controller(ENV_POOLS, reconciler.reconcile, [Owned(PODS, POOL_LABEL, pool_of, shared)])


def rolloutjob_controller(reconciler: RolloutJobReconciler) -> Controller:
    return Controller(ROLLOUT_JOBS, reconciler.reconcile)


class WorkQueue:
    def __init__(self) -> None:
        self._queue: asyncio.Queue[Key] = asyncio.Queue()
        self._queued: set[Key] = set()
        self._active: set[Key] = set()
        self._dirty: set[Key] = set()

    def add(self, key: Key) -> None:
        if key in self._active:
            self._dirty.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def add_after(self, key: Key, delay: float) -> None:
        asyncio.get_running_loop().call_later(delay, self.add, key)

    async def get(self) -> Key:
        key = await self._queue.get()
        self._queued.discard(key)
        self._active.add(key)
        return key

    def done(self, key: Key) -> None:
        self._active.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def idle(self) -> bool:
        return not (self._queued or self._active)


class Operator:
    def __init__(
        self,
        api: KubeApi,
        namespace: str | None,
        *,
        workers: int = 8,
        retry_delay_s: float = 1.0,
        max_delay_s: float = 60.0,
        resync_s: float | None = 300.0,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.workers = workers
        self.retry_delay_s = retry_delay_s
        self.max_delay_s = max_delay_s
        self.resync_s = resync_s
        self.controllers: list[Controller] = []
        self.informers: list[Informer] = []
        self.queue = WorkQueue()
        self.failures: dict[Key, int] = {}
        self.reconciles = 0
        self._tasks: list[asyncio.Task[None]] = []

    def add(self, controller: Controller) -> None:
        index = len(self.controllers)
        self.controllers.append(controller)

        def primary(kind: str, obj: KubeObject) -> None:
            metadata = obj["metadata"]
            self.queue.add((index, metadata["namespace"], metadata["name"]))

        self.informers.append(
            Informer(self.api, controller.resource, self.namespace, on_event=primary)
        )
        for owned in controller.owned:

            def secondary(kind: str, obj: KubeObject, owned: Owned = owned) -> None:
                owner = owned.owner_of(obj)
                if owner:
                    self.queue.add((index, obj["metadata"]["namespace"], owner))

            if owned.informer is not None:
                owned.informer.handlers.append(secondary)
                self.informers.append(owned.informer)
                continue
            self.informers.append(
                Informer(
                    self.api,
                    owned.resource,
                    self.namespace,
                    label_selector=owned.label_selector,
                    on_event=secondary,
                )
            )

    async def start(self) -> None:
        """Start watching and working; returns once every informer has listed."""
        for informer in self.informers:
            informer.start()
        await asyncio.gather(*(informer.synced.wait() for informer in self.informers))
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._work()) for _ in range(self.workers)]
        if self.resync_s:
            self._tasks.append(loop.create_task(self._resync(self.resync_s)))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await asyncio.gather(*(informer.stop() for informer in self.informers))

    async def run(self) -> None:
        """Run until cancelled (``envfarm operator``)."""
        await self.start()
        try:
            await asyncio.Event().wait()
        finally:
            await self.stop()

    async def _resync(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            for index, controller in enumerate(self.controllers):
                primary = next(i for i in self.informers if i.resource == controller.resource)
                for namespace, name in list(primary.cache):
                    self.queue.add((index, namespace, name))

    async def _work(self) -> None:
        while True:
            key = await self.queue.get()
            try:
                await self._reconcile(key)
            finally:
                self.queue.done(key)

    async def _reconcile(self, key: Key) -> None:
        index, namespace, name = key
        controller = self.controllers[index]
        self.reconciles += 1
        try:
            again = await controller.reconcile(namespace, name)
        except EnvfarmError as exc:
            if exc.retryable:
                self._retry(key, exc)
            else:
                self.failures.pop(key, None)
                await self._permanent(controller, namespace, name, exc)
        except Exception as exc:  # a bug or a foreign error: retry, loudly
            log.exception("reconciling %s %s/%s failed", controller.resource, namespace, name)
            self._retry(key, exc)
        else:
            self.failures.pop(key, None)
            if again is not None:
                self.queue.add_after(key, again)

    def _retry(self, key: Key, exc: Exception) -> None:
        attempts = self.failures.get(key, 0)
        self.failures[key] = attempts + 1
        delay = min(self.retry_delay_s * 2**attempts, self.max_delay_s)
        log.info("retrying %s in %.1f s: %s", key, delay, exc)
        self.queue.add_after(key, delay)

    async def _permanent(
        self, controller: Controller, namespace: str, name: str, exc: EnvfarmError
    ) -> None:
        resource = resolve(controller.resource)
        try:
            obj = await self.api.get(resource, namespace, name)
            reason = type(exc).__name__
            await set_condition(self.api, resource, obj, "Ready", False, reason, str(exc))
        except KubeError as status_error:
            log.warning("could not record %s on %s/%s: %s", exc, namespace, name, status_error)
