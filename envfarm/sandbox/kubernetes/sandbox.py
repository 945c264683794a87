"""One environment as a pod: created, awaited on the backend's shared watch, driven through the
in-sandbox helper over one long-lived attach stream, deleted.

``start`` claims a warm pod of the task's EnvPool or creates the pod (``podspec``), waits until
it is Ready (every service healthy) within ``start_timeout_s`` plus the Docker backend's
healthcheck budget (``sandbox/health.py``), then opens the stream
(``pods/attach`` to the main container's helper, or with ``channel="exec"`` one long-lived
exec of a second helper, which keeps the protocol out of the container's log) and pings the
helper. Every tool call is one request on that stream: never an API-server exec per command,
and one stream (one connection) per sandbox. When the stream ends, calls fail with
``SandboxGone`` saying what happened to the pod (TTL expired, OOM-killed, deleted).
``stop`` closes the stream, deletes the pod and waits until it is gone.

``fresh_verifier`` (clean-room grading, ``verifier_pod``) deletes the pod and starts the
verifier's in a fresh one, never from a pool; ``stop`` removes both. With sidecars it adds the
verifier as an ephemeral container to the running pod instead, next to the services.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import NoReturn

from envfarm.errors import (
    KubeError,
    KubeNotFound,
    SandboxError,
    SandboxGone,
    SandboxStartError,
)
from envfarm.k8s.api import PODS, KubeObject
from envfarm.plan.models import SandboxSpec
from envfarm.sandbox.base import ExecResult, Sandbox, VerifierImage, VerifierPhases
from envfarm.sandbox.channel.client import Channel
from envfarm.sandbox.health import healthcheck_budget_s
from envfarm.sandbox.kubernetes.environment_pods import EnvironmentPods
from envfarm.sandbox.kubernetes.podcontainers import HELPER_PATH, MAIN_CONTAINER
from envfarm.sandbox.kubernetes.podspec import LABEL_NETWORK
from envfarm.sandbox.kubernetes.podstate import describe, ephemeral_verdict, start_verdict
from envfarm.sandbox.kubernetes.verifier_pod import (
    VERIFIER_CONTAINER,
    refuse_own_image,
    verifier_container,
    verifier_pod,
)

DELETE_WAIT_S = 120.0


class KubernetesSandbox(Sandbox, VerifierPhases):
    def __init__(
        self,
        pods: EnvironmentPods,
        spec: SandboxSpec,
        pod: KubeObject,
        run_id: str = "adhoc",
        *,
        cold: bool = False,
        container: str = MAIN_CONTAINER,
    ) -> None:
        self.pods = pods
        """Its backend's environment pods: the API, the namespace, the watch, the pools."""
        self.run_id = run_id
        self.launch = "cold"
        """``warm`` when the environment was claimed from an EnvPool."""
        self.spec = spec
        self.pod = pod
        self.namespace = pods.namespace
        self.name: str = pod["metadata"].get("name", "")
        self.cold = cold
        """Never claim a warm pod (the fresh verifier's)."""
        self.container = container
        """Where the helper runs: the main container, or an ephemeral verifier's."""
        self._channel: Channel | None = None
        self._created = False
        self._fresh: list[KubernetesSandbox] = []
        self._retired = False
        self._deleted = False  # its pod's deletion was asked for (for the fresh verifier)

    @property
    def channel(self) -> Channel | None:
        return self._channel

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            with contextlib.suppress(SandboxError):  # the start's own failure is the news
                await self.stop()
            raise

    async def _start(self) -> None:
        api, config = self.pods.api, self.pods.config
        warm: KubeObject | None = None
        if not self.cold:
            warm = await self.pods.claim(self.spec, self.pod, self.run_id, claimer=self.name)
        if warm is not None:
            self._created, self.name, self.launch = True, warm["metadata"]["name"], "warm"
            await self.connect()
            return
        try:
            created = await api.create(PODS, self.namespace, self.pod)
        except KubeError as exc:
            raise SandboxStartError(f"could not create the environment pod: {exc}") from exc
        self._created = True
        self.name = created["metadata"]["name"]
        budget = config.start_timeout_s + healthcheck_budget_s(self.spec.environment)
        await self.wait_ready(budget)
        await self.connect()

    async def wait_ready(self, budget: float) -> None:
        try:
            await self.pods.watch.wait(self.namespace, self.name, start_verdict, budget)
        except TimeoutError:
            seen = self.pods.watch.current(self.namespace, self.name)
            where = describe(seen) if seen is not None else "never seen by the watch"
            raise SandboxStartError(
                f"environment pod {self.name} was not ready within {budget:g} s: {where}"
            ) from None

    async def connect(self) -> None:
        """Open the stream to the helper and ping it."""
        api, config = self.pods.api, self.pods.config
        command = [HELPER_PATH] if config.channel == "exec" else None
        try:
            stream = await api.attach(self.namespace, self.name, self.container, command=command)
            self._channel = await Channel.over_stream(stream, name=self.name)
            await self._channel.ping()
        except (KubeError, SandboxError, OSError) as exc:
            raise SandboxStartError(
                f"the sandbox helper of {self.name} did not answer: {exc}"
            ) from exc

    async def exec(
        self,
        command: str,
        *,
        timeout: float | None = None,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
    ) -> ExecResult:
        channel = self._ready_channel()
        started = time.monotonic()
        try:
            outcome = await channel.exec(
                command,
                cwd=workdir,
                env=env,
                user=user,
                timeout=timeout,
                output_cap=self.pods.config.output_cap,
            )
        except SandboxGone as exc:
            await self._explain_gone(exc)
        return ExecResult(
            exit_code=outcome.docker_exit_code(),
            stdout=outcome.stdout.decode(errors="replace"),
            stderr=outcome.stderr.decode(errors="replace"),
            timed_out=outcome.timed_out,
            duration_s=time.monotonic() - started,
        )

    async def read_file(self, path: str, *, user: str | None = None) -> bytes:
        channel = self._ready_channel()
        try:
            return await channel.read_file(path, user=user)
        except SandboxGone as exc:
            await self._explain_gone(exc)

    async def write_file(
        self, path: str, data: bytes, mode: int = 0o644, *, user: str | None = None
    ) -> None:
        if not path.startswith("/"):
            raise ValueError(f"sandbox paths must be absolute, got {path!r}")
        channel = self._ready_channel()
        try:
            await channel.write_file(path, data, mode=mode, user=user)
        except SandboxGone as exc:
            await self._explain_gone(exc)

    async def enter_verifier_phase(self, *, network: bool) -> None:
        """The NetworkPolicy follows the pod's label."""
        label = "internet" if network else "none"
        patch = {"metadata": {"labels": {LABEL_NETWORK: label}}}
        try:
            await self.pods.api.patch(PODS, self.namespace, self.name, patch)
        except KubeError as exc:
            raise SandboxError(
                f"could not switch {self.name} to the verifier's network: {exc}"
            ) from exc

    async def fresh_verifier(self, *, network: bool, image: VerifierImage | None = None) -> Sandbox:
        """Delete this pod (its processes end with it) and start the verifier's from the same
        spec with ``network``; with sidecars, a verifier container in this pod (no own image)."""
        refuse_own_image(image)
        if self._channel is None or self._retired:
            raise SandboxError(f"sandbox {self.name or '(not created)'} is not started")
        if self.spec.environment.compose is not None and self.spec.environment.compose.sidecars:
            return await self._verifier_next_to_services(network)
        self._retired = True
        self._channel.close()
        try:
            await self.pods.api.delete(PODS, self.namespace, self.name)
        except KubeNotFound:
            pass
        except KubeError as exc:
            raise SandboxError(f"could not stop environment pod {self.name}: {exc}") from exc
        self._deleted = True
        pod = verifier_pod(self.pod, self.name, network=network)
        fresh = KubernetesSandbox(self.pods, self.spec, pod, self.run_id, cold=True)
        self._fresh.append(fresh)
        await fresh.start()
        return fresh

    async def _verifier_next_to_services(self, network: bool) -> Sandbox:
        """The agent's processes killed, the pod on the verifier's network, and a fresh main
        container added to it as an ephemeral container (``verifier_pod``)."""
        channel = self._ready_channel()
        try:
            await channel.sweep(time.time())
        except SandboxGone as exc:
            await self._explain_gone(exc)
        self._retired = True
        channel.close()
        await self.enter_verifier_phase(network=network)
        pod = self.pods.watch.current(self.namespace, self.name) or self.pod
        patch = {"spec": {"ephemeralContainers": [verifier_container(pod)]}}
        try:
            await self.pods.api.patch(
                PODS, self.namespace, self.name, patch, subresource="ephemeralcontainers"
            )
        except KubeError as exc:
            raise SandboxStartError(f"could not add the verifier to {self.name}: {exc}") from exc
        fresh = KubernetesSandbox(
            self.pods, self.spec, self.pod, self.run_id, cold=True, container=VERIFIER_CONTAINER
        )
        fresh.name = self.name  # not created by it: its stop leaves the pod to this one
        self._fresh.append(fresh)
        budget = self.pods.config.start_timeout_s
        try:
            await self.pods.watch.wait(
                self.namespace, self.name, ephemeral_verdict(VERIFIER_CONTAINER), budget
            )
        except TimeoutError:
            raise SandboxStartError(
                f"the verifier container of {self.name} was not running within {budget:g} s"
            ) from None
        await fresh.connect()
        return fresh

    def _ready_channel(self) -> Channel:
        if self._retired:
            raise SandboxError(f"sandbox {self.name} was stopped for its clean-room verifier")
        if self._channel is None:
            raise SandboxError(f"sandbox {self.name or '(not created)'} is not started")
        return self._channel

    async def _explain_gone(self, exc: SandboxGone) -> NoReturn:
        """The stream ended: say what happened to the pod, as far as the API tells."""
        try:
            pod: KubeObject | None = await self.pods.api.get(PODS, self.namespace, self.name)
        except KubeNotFound:
            pod = None
        except KubeError:
            raise exc from None
        raise SandboxGone(f"environment {self.name} is gone ({exc}): {describe(pod)}") from exc

    async def _teardown(self) -> None:
        fresh, self._fresh = self._fresh, []
        outcomes = await asyncio.gather(
            self._remove_pod(), *(box.stop() for box in fresh), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _remove_pod(self) -> None:
        if self._channel is not None:
            self._channel.close()
        if not self._created or not self.name:
            return
        api = self.pods.api
        try:
            if not self._deleted:  # else only waited for: one request fewer an episode
                await api.delete(PODS, self.namespace, self.name)
        except KubeNotFound:
            return
        except KubeError as exc:
            raise SandboxError(f"could not delete environment pod {self.name}: {exc}") from exc
        try:
            await self.pods.watch.wait(
                self.namespace, self.name, lambda pod: True if pod is None else None, DELETE_WAIT_S
            )
        except TimeoutError:
            raise SandboxError(
                f"environment pod {self.name} was not gone {DELETE_WAIT_S:g} s after its deletion"
            ) from None
