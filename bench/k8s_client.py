"""envfarm's own Kubernetes client (``envfarm/k8s/rest.py``) against the maintained library
``kubernetes_asyncio``, same jobs, same kubeconfig, on the project's cluster (scripts/k8s-cluster),
in one run; arms alternate in a rotated order each round; medians of ``--rounds``.

- pod stream, ``exec`` into a pod of the task image of ``tasks/word-count-cli``: envfarm's
  ``RestKubeApi.attach(..., command=[...])`` against ``connect_get_namespaced_pod_exec(...,
  _preload_content=False)`` of ``CoreV1Api(WsApiClient(...))`` (a bare WebSocket, framed here):
  the protocol chosen (by default; v5 asked in ``_headers``), whether 255,0 closes stdin; open,
  a 64-byte echo through ``cat``, close; an echo on an open stream (median of 50); 3 MiB of
  random bytes through ``cat``, and through ``sha256sum``;
- REST: a GET of the pod (mean of 20; the library's typed ``V1Pod`` and raw); a list, a merge
  patch, a watch from the list's version to the patch; a ``V1Pod``'s CPU; a 410's exception.

Needs the cluster up and the task's image pushed (``envfarm push --registry REGISTRY
tasks/word-count-cli``); works in a namespace of its own, deleted at the end. Run:
``python bench/k8s_client.py [--rounds 15]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import statistics
import subprocess
import time
import timeit
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import load_kube_config
from kubernetes_asyncio.stream import WsApiClient
from kubernetes_asyncio.watch import Watch

from envfarm.errors import KubeError
from envfarm.k8s.api import PODS, PodStream
from envfarm.k8s.kubeconfig import load_kubeconfig
from envfarm.k8s.rest import RestKubeApi
from envfarm.plan.planner import plan_episode
from envfarm.sandbox.kubernetes.podimages import ImageNaming, cluster_images
from envfarm.settings import current
from envfarm.spec.task import load_task

REPO = Path(__file__).resolve().parents[1]
TASK, CLUSTER = REPO / "tasks" / "word-count-cli", REPO / "scripts" / "k8s-cluster"
BULK = os.urandom(3 * 1024 * 1024)
V5 = {"sec-websocket-protocol": "v5.channel.k8s.io"}
SHA_X, SHA_BULK = (hashlib.sha256(data).hexdigest().encode() + b"  -\n" for data in (b"x", BULK))
Arm = Callable[[], Awaitable[float]]


class LibStream:
    """The library's exec socket (a bare aiohttp WebSocket) with the channel framing added."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.protocol = ws._response.headers.get("Sec-WebSocket-Protocol", "")

    async def send(self, data: bytes) -> None:
        for start in range(0, len(data), 256 * 1024):
            await self.ws.send_bytes(b"\x00" + data[start : start + 256 * 1024])

    async def receive(self) -> tuple[int, bytes] | None:
        async for message in self.ws:  # ends at a close or an error
            if message.type == aiohttp.WSMsgType.BINARY and message.data[:1] in (b"\x01", b"\x02"):
                return message.data[0], message.data[1:]
        return None

    async def close(self) -> None:
        await close_stdin(self)  # the library has no call for it (nor for v5)
        await self.ws.close()


class Clients:
    def __init__(self, ours: RestKubeApi, conf: Configuration, ns: str, pod: str) -> None:
        self.ours, self.ns, self.pod = ours, ns, pod
        # Any: its annotations lack ``_headers``, have ``command: str`` and a model as answer
        self.core: Any = CoreV1Api(ApiClient(conf))
        self.ws: Any = CoreV1Api(WsApiClient(conf))

    async def lib_exec(self, command: list[str], headers: dict[str, str] = V5) -> LibStream:
        opened = await self.ws.connect_get_namespaced_pod_exec(
            self.pod, self.ns, command=command, container="main", stdin=True, stdout=True,
            stderr=True, tty=False, _preload_content=False, _headers=dict(headers),
        )  # fmt: skip
        return LibStream(await opened)

    async def open(self, lib: bool, command: list[str]) -> PodStream | LibStream:
        return await (self.lib_exec(command) if lib else
                      self.ours.attach(self.ns, self.pod, "main", command=command))  # fmt: skip


async def read(stream: PodStream | LibStream, size: int) -> bytes:
    got = b""
    while len(got) < size and (message := await stream.receive()) is not None:
        got += message[1]
    return got


def stream_arms(c: Clients, lib: bool) -> dict[str, Arm]:
    async def open_echo_close() -> float:
        start, stream = time.perf_counter(), await c.open(lib, ["cat"])
        await stream.send(b"e" * 64)
        assert await read(stream, 64) == b"e" * 64
        await stream.close()
        return time.perf_counter() - start

    async def echo() -> float:
        stream, times = await c.open(lib, ["cat"]), []
        for _ in range(50):
            start = time.perf_counter()
            await stream.send(b"e" * 64)
            assert await read(stream, 64) == b"e" * 64
            times.append(time.perf_counter() - start)
        await stream.close()
        return statistics.median(times)

    async def bulk(command: str, out: bytes) -> float:
        start, stream = time.perf_counter(), await c.open(lib, [command])
        sent = asyncio.create_task(stream.send(BULK))  # cat echoes while stdin still comes
        if command == "sha256sum":
            await sent
            await close_stdin(stream)
        assert await read(stream, len(out)) == out
        await sent
        await stream.close()
        return time.perf_counter() - start

    return {"open, echo, close": open_echo_close, "echo on an open stream": echo,
            "3 MiB through cat": lambda: bulk("cat", BULK),
            "3 MiB through sha256sum": lambda: bulk("sha256sum", SHA_BULK)}  # fmt: skip


async def close_stdin(stream: PodStream | LibStream) -> None:
    """The v5 close of stdin (255, 0); the socket stays open for what stdout still has."""
    ws: aiohttp.ClientWebSocketResponse = getattr(stream, "ws")  # noqa: B009
    if not ws.closed:
        await ws.send_bytes(b"\xff\x00")


async def stream_facts(c: Clients) -> dict[str, Any]:
    ours, default = await c.open(False, ["cat"]), await c.lib_exec(["cat"], {})
    asked = await c.lib_exec(["cat"])
    facts: dict[str, Any] = {"envfarm protocol": getattr(ours, "ws").protocol}  # noqa: B009
    facts |= {"library protocol": default.protocol, "v5 in _headers": asked.protocol}
    facts["library aiohttp ws.protocol"] = asked.ws.protocol
    await asyncio.gather(ours.close(), default.close(), asked.close())
    for name, headers in (("library", {}), ("v5 in _headers", V5)):
        stream, key = await c.lib_exec(["sha256sum"], headers), f"{name}: 255,0 ends stdin"
        await stream.send(b"x")
        await close_stdin(stream)
        facts[key] = False
        with contextlib.suppress(TimeoutError):  # sha256sum prints once its stdin is closed
            facts[key] = await asyncio.wait_for(read(stream, 64), 5) == SHA_X
        await stream.ws.close()
    return facts


def rest_arms(c: Clients) -> dict[str, Arm]:
    async def timed(call: Callable[[], Awaitable[Any]], n: int = 20) -> float:
        start = time.perf_counter()
        for _ in range(n):
            await call()
        return (time.perf_counter() - start) / n

    async def lib_raw() -> Any:
        response = await c.core.read_namespaced_pod(c.pod, c.ns, _preload_content=False)
        return json.loads(await response.read())

    async def ours_watch() -> float:
        start, label = time.perf_counter(), {"n": uuid.uuid4().hex[:8]}
        listing = await c.ours.list(PODS, c.ns)
        await c.ours.patch(PODS, c.ns, c.pod, {"metadata": {"labels": label}})
        stream = c.ours.watch(PODS, c.ns, resource_version=listing.resource_version)
        assert (await anext(aiter(stream))).object["metadata"]["labels"] == label
        await stream.aclose()  # type: ignore[attr-defined]
        return time.perf_counter() - start

    async def lib_watch() -> float:
        start, label, watch = time.perf_counter(), {"n": uuid.uuid4().hex[:8]}, Watch()
        listing = await c.core.list_namespaced_pod(c.ns)
        merge = "application/merge-patch+json"  # not its default for a dict: strategic merge
        await c.core.patch_namespaced_pod(c.pod, c.ns, {"metadata": {"labels": label}},
                                          _content_type=merge)  # fmt: skip
        stream = watch.stream(c.core.list_namespaced_pod, c.ns, allow_watch_bookmarks=True,
                              resource_version=listing.metadata.resource_version)  # fmt: skip
        assert (await anext(aiter(stream)))["object"].metadata.labels == label
        await watch.close()
        return time.perf_counter() - start

    return {
        "GET pod: envfarm": lambda: timed(lambda: c.ours.get(PODS, c.ns, c.pod)),
        "GET pod: library": lambda: timed(lambda: c.core.read_namespaced_pod(c.pod, c.ns)),
        "GET pod, raw JSON: library": lambda: timed(lib_raw),
        "list, patch, watch: envfarm": ours_watch,
        "list, patch, watch: library": lib_watch,
    }


async def rest_facts(c: Clients) -> dict[str, object]:
    raw = json.dumps(await c.ours.get(PODS, c.ns, c.pod))
    lib = c.core.api_client
    typed = timeit.timeit(lambda: lib.deserialize(SimpleNamespace(data=raw), "V1Pod"), number=200)
    plain = timeit.timeit(lambda: json.loads(raw), number=200)
    start, watch = time.perf_counter(), Watch()  # no timeout_seconds: a 410 is retried, once
    facts = {"Watch() ms": (time.perf_counter() - start) * 1e3, "pod JSON bytes": len(raw),
             "V1Pod us": typed * 5e3, "json.loads us": plain * 5e3,
             "envfarm, watch from 1": await raised(c.ours.watch(PODS, c.ns, resource_version="1")),
             "library, watch from 1": await raised(watch.stream(c.core.list_namespaced_pod, c.ns,
                                                                resource_version="1"))}  # fmt: skip
    await watch.close()
    return facts


async def raised(events: AsyncIterator[Any]) -> str:
    try:
        return f"no error but {await anext(aiter(events))}"[:90]
    except (KubeError, ApiException) as exc:
        return f"{type(exc).__name__} {exc.status}: {str(exc).strip()[:60]}"


async def rounds(arms: dict[str, Arm], n: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    for r in range(-1, n):  # round -1 warms up
        for arm in [*arms][r % len(arms) :] + [*arms][: r % len(arms)]:
            took = await arms[arm]()
            times[arm] += [took] if r >= 0 else []
    return times


async def measure(args: argparse.Namespace, found: dict[str, str]) -> dict[str, Any]:
    path = Path(found["ENVFARM_TEST_KUBECONFIG"])
    ours, conf = RestKubeApi(await load_kubeconfig(path)), Configuration()
    await load_kube_config(config_file=str(path), client_configuration=conf, persist_config=False)
    spec = plan_episode(load_task(TASK), settings=current()).sandbox
    image = cluster_images(spec.environment, ImageNaming(registry=args.registry)).main
    pod = {"containers": [{"name": "main", "image": image, "command": ["sleep", "infinity"]}]}
    await ours.create(PODS, args.ns, {"metadata": {"name": "client"}, "spec": pod})
    c = Clients(ours, conf, args.ns, "client")
    try:
        while (await ours.get(PODS, args.ns, "client")).get("status", {}).get("phase") != "Running":
            await asyncio.sleep(0.2)
        arms = {f"{k}: envfarm": v for k, v in stream_arms(c, False).items()}
        arms |= {f"{k}: library": v for k, v in stream_arms(c, True).items()}
        times = await rounds(arms | rest_arms(c), args.rounds)
        facts = await stream_facts(c) | await rest_facts(c)  # last: etcd compacts every 5 min
        print("\n".join(f"{key}: {value}" for key, value in facts.items()), flush=True)
    finally:
        await asyncio.gather(c.core.api_client.close(), c.ws.api_client.close(), ours.close())
    return {"facts": facts, "times": times}


def report(times: dict[str, list[float]]) -> None:
    print(f"\n{'median of rounds':<44}{'envfarm':>10}{'library':>10}  envfarm / library")
    pairs = [(k, k[: -len("envfarm")] + "library") for k in times if k.endswith("envfarm")]
    pairs.append(("GET pod: envfarm", "GET pod, raw JSON: library"))  # the other a V1Pod
    for mine, theirs in pairs:
        a, b = statistics.median(times[mine]), statistics.median(times[theirs])
        label = theirs.replace(": library", "")
        print(f"{label:<44}{a * 1e3:>8.2f}ms{b * 1e3:>8.2f}ms  {a / b:.2f}x", flush=True)


def main(args: argparse.Namespace) -> None:
    run = subprocess.run([str(CLUSTER), "env"], capture_output=True, text=True, check=True)
    found = dict(line.split("=", 1) for line in run.stdout.split())
    kubectl = [f"{found['ENVFARM_K8S_BIN']}/kubectl", "--kubeconfig"]
    kubectl.append(found["ENVFARM_TEST_KUBECONFIG"])
    args.registry = found["ENVFARM_TEST_IMAGE_REGISTRY"]
    args.ns = f"envfarm-client-{uuid.uuid4().hex[:8]}"

    def sh(*command: str) -> str:
        return subprocess.run([*kubectl, *command], capture_output=True, text=True).stdout

    sh("create", "namespace", args.ns)
    try:
        sh("label", "namespace", args.ns, "pod-security.kubernetes.io/enforce=baseline")
        while "/default" not in sh("-n", args.ns, "get", "serviceaccounts", "-o", "name"):
            time.sleep(0.2)
        load = [os.getloadavg()[0]]
        got = asyncio.run(measure(args, found)) | {"load": [*load, os.getloadavg()[0]]}
    finally:
        sh("delete", "namespace", args.ns, "--wait=false")
    report(got["times"])
    print(json.dumps(got))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    main(parser.parse_args())
