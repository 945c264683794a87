"""envfarm's Kubernetes backend on the project's one-node cluster (scripts/k8s-cluster), against
``kubectl`` on the same cluster and the Docker backend on the same machine, in one run.

- pod start: ``backend.create(spec, image).start()`` and a first ``exec`` of ``true`` on the
  task image of ``tasks/word-count-cli`` (p50, p95 of ``--rounds``; split where the stream is
  requested, the pod seen Ready), against ``kubectl run`` of that image, ``kubectl wait`` and
  ``kubectl exec ... true``; and, to tell client from pod, ``kubectl apply`` of envfarm's pod and
  of ``kubectl run``'s pod plus envfarm's init container. Arms alternate in a rotated order;
- API requests: each HTTP request ``RestKubeApi`` sends (an aiohttp trace) for one lifecycle
  (start, 5 execs, a file written and read, stop) on a new backend and again on the same one;
- episodes per minute: ``envfarm run tasks/word-count-cli --policy oracle`` with group size and
  concurrency each of ``--concurrency`` on the Kubernetes and the Docker backend, alternating,
  ``--run-rounds`` times: the command's wall, the most live pods on the node and waiting for
  it (polled each second), the API requests the run sent (counted in its process). A
  Kubernetes run first waits up to ``--room-wait`` s for CPU requests left on the node for a pod
  (``--request-ratio``: what the pod-start arms request of their limits; requests decide where
  a pod goes, not how it starts: other users' pods may hold the node's).

Needs the cluster up, Docker, and the task's images pushed (``envfarm push --registry REGISTRY
tasks/word-count-cli``). Works in a namespace of its own, deleted at the end. Prints tables and,
last, one JSON object.

    python bench/k8s_pods.py [--rounds 20] [--run-rounds 2] [--concurrency 4 8] [--request-ratio R]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

from envfarm.cli.main import cli
from envfarm.k8s import rest
from envfarm.k8s.kubeconfig import load_kubeconfig
from envfarm.plan.planner import plan_episode
from envfarm.sandbox.kubernetes.backend import KubernetesBackend, KubernetesBackendConfig
from envfarm.sandbox.kubernetes.podimages import ImageNaming
from envfarm.sandbox.kubernetes.podspec import environment_pod
from envfarm.settings import Settings, current
from envfarm.spec.task import load_task

REPO = Path(__file__).resolve().parents[1]
TASK, CLUSTER = REPO / "tasks" / "word-count-cli", REPO / "scripts" / "k8s-cluster"
REQUESTS: list[tuple[float, str]] = []  # (when, "METHOD resource[/subresource]") of each
COUNTS_ENV = "ENVFARM_BENCH_COUNTS"
Times = dict[str, list[dict[str, float]]]  # per arm, per round: phase -> seconds


async def _seen(_: Any, __: Any, params: aiohttp.TraceRequestStartParams) -> None:
    parts = params.url.path.strip("/").split("/")  # /api/v1/namespaces/NS/pods/NAME/attach
    if "namespaces" in parts:
        parts = parts[parts.index("namespaces") + 2 :]
    kind = parts[0] + (f"/{parts[2]}" if len(parts) > 2 else "")
    kind += " watch" if params.url.query.get("watch") == "1" else ""
    REQUESTS.append((time.perf_counter(), f"{params.method} {kind}"))


class CountingApi(rest.RestKubeApi):
    """``RestKubeApi`` whose session reports each request it sends to ``REQUESTS``."""

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            trace = aiohttp.TraceConfig()
            trace.on_request_start.append(_seen)
            connector = aiohttp.TCPConnector(limit=self._connections, ssl=self._ssl)
            self._session = aiohttp.ClientSession(connector=connector, trace_configs=[trace])
        return self._session


def counted_cli(args: list[str]) -> None:
    """``envfarm ARGS`` in this process, its requests counted into the file $COUNTS_ENV names."""
    rest.RestKubeApi = CountingApi  # type: ignore[misc]
    try:
        cli.main(args, prog_name="envfarm")
    finally:
        Path(os.environ[COUNTS_ENV]).write_text(json.dumps(Counter(k for _, k in REQUESTS)))


def sh(*command: str, stdin: str | None = None, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(command, input=stdin, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} failed:\n{result.stderr[-3000:]}")
    return result.stdout


def pct(values: list[float], q: float) -> float:
    return sorted(values)[max(math.ceil(q * len(values)) - 1, 0)]


class PodStarts:
    """The ways to a first exec in a new pod, on one cluster and namespace."""

    def __init__(self, kubectl: list[str], backend: KubernetesBackend, settings: Settings) -> None:
        self.kubectl, self.backend = [*kubectl, "-n", backend.config.namespace], backend
        self.spec = plan_episode(load_task(TASK), settings=settings).sandbox
        self.images = backend.images(self.spec)

    async def envfarm(self, n: int, execs: int = 1, files: bool = False) -> dict[str, float]:
        start = time.perf_counter()
        image = await self.backend.prepare(self.spec)
        sandbox = self.backend.create(self.spec, image, run_id=f"bench-{n}")
        await sandbox.start()
        started = time.perf_counter()
        attached = max(at for at, kind in REQUESTS if kind == "GET pods/attach")
        assert (await sandbox.exec("true")).exit_code == 0
        done = time.perf_counter()
        for _ in range(execs - 1):
            await sandbox.exec("wc -l /etc/passwd")
        if files:
            await sandbox.write_file("/tmp/bench.txt", b"x" * 100_000)
            assert len(await sandbox.read_file("/tmp/bench.txt")) == 100_000
        await sandbox.stop()
        # ready: the pod created and seen Ready; attach: the stream opened, the helper pinged
        ready, attach, first = attached - start, started - attached, done - started
        return {"ready": ready, "attach": attach, "exec": first, "total": done - start}

    def _by_kubectl(self, name: str, create: list[str], stdin: str | None) -> dict[str, float]:
        start = time.perf_counter()
        sh(*self.kubectl, *create, stdin=stdin)
        sh(*self.kubectl, "wait", "--for=condition=Ready", f"pod/{name}", "--timeout=300s")
        ready = time.perf_counter()
        sh(*self.kubectl, "exec", name, "--", "true")  # the first container: main
        done = time.perf_counter()
        sh(*self.kubectl, "delete", "pod", name, "--now")
        return {"ready": ready - start, "exec": done - ready, "total": done - start}

    async def kubectl_run(self, n: int) -> dict[str, float]:
        """``kubectl run`` of the task image: one container, nothing else."""
        run = ["run", f"plain-{n}", f"--image={self.images.main}", "--restart=Never"]
        run += ["--command", "--", "sleep", "infinity"]
        return await asyncio.to_thread(self._by_kubectl, f"plain-{n}", run, None)

    async def kubectl_envfarm_pod(self, n: int) -> dict[str, float]:
        """envfarm's pod for the task, as the backend builds it, through ``kubectl apply``."""
        options = self.backend.pod_options(self.spec, "bench", name=f"shaped-{n}")
        pod = environment_pod(self.spec, self.images, options)
        return await self._apply(f"shaped-{n}", pod)

    async def kubectl_init_pod(self, n: int) -> dict[str, float]:
        """``kubectl run``'s pod plus envfarm's init container (the helper copied)."""
        copy = ["cp", self.images.helper_binary, "/helper/sandboxd"]
        mounts = [{"name": "helper", "mountPath": "/helper"}]
        init = {
            "name": "copy",
            "image": self.images.helper,
            "command": copy,
            "volumeMounts": mounts,
        }
        main = {"name": "main", "image": self.images.main, "command": ["sleep", "infinity"]}
        volumes = [{"name": "helper", "emptyDir": {}}]
        spec = {"initContainers": [init], "containers": [main], "volumes": volumes}
        return await self._apply(f"init-{n}", {"metadata": {"name": f"init-{n}"}, "spec": spec})

    async def _apply(self, name: str, pod: dict[str, Any]) -> dict[str, float]:
        manifest = json.dumps({"apiVersion": "v1", "kind": "Pod"} | pod)
        return await asyncio.to_thread(self._by_kubectl, name, ["apply", "-f", "-"], manifest)


async def pod_starts(args: argparse.Namespace, kubectl: list[str], found: dict[str, str]) -> Any:
    api = CountingApi(await load_kubeconfig(Path(found["ENVFARM_TEST_KUBECONFIG"])))
    naming = ImageNaming(registry=found["ENVFARM_TEST_IMAGE_REGISTRY"])
    backend = KubernetesBackend(api, KubernetesBackendConfig(namespace=args.ns, images=naming))
    starts = PodStarts(kubectl, backend, current().with_flags(request_ratio=args.request_ratio))
    try:
        requests = []
        for n in range(2):  # a new backend (its watch starts), then the same one again
            seen = len(REQUESTS)
            await starts.envfarm(-1 - n, execs=5, files=True)
            requests.append(Counter(kind for _, kind in REQUESTS[seen:]))
        arms = {
            "envfarm": starts.envfarm,
            "kubectl run": starts.kubectl_run,
            "kubectl apply, envfarm's pod": starts.kubectl_envfarm_pod,
            "kubectl apply, run's + init": starts.kubectl_init_pod,
        }
        for first in arms.values():
            await first(-1)  # warm: the images on the node, the processes' imports done
        times: Times = {arm: [] for arm in arms}
        order = list(arms)
        for n in range(args.rounds):
            for arm in order[n % len(order) :] + order[: n % len(order)]:
                times[arm].append(await arms[arm](n))
            print(f"round {n + 1}: " + ", ".join(f"{t[-1]['total']:.2f}" for t in times.values()))
    finally:
        await backend.close()
        await api.close()
    return requests, times


def free_cpu_m(kubectl: list[str]) -> int:
    """The node's allocatable CPU less every pod's requests, in millicores."""
    described = sh(*kubectl, "describe", "nodes")  # the one node
    allocatable = described.split("Allocatable:")[1].split()[1]
    requested = described.split("Allocated resources:")[1].split("cpu")[1].split()[0]
    milli = [int(q[:-1]) if q.endswith("m") else int(q) * 1000 for q in (allocatable, requested)]
    return milli[0] - milli[1]


def pods_polled(kubectl: list[str], stop: threading.Event, most: dict[str, int]) -> None:
    """The most live environment pods on the node and waiting for one, once a second."""
    path = "jsonpath={range .items[*]}{.spec.nodeName},{.metadata.deletionTimestamp}{'\\n'}{end}"
    while not stop.wait(1.0):
        pods = [line.split(",") for line in sh(*kubectl, "get", "pods", "-o", path).split()]
        for key, count in (("on node", sum(1 for n, d in pods if n and not d)),
                           ("waiting", sum(1 for n, _ in pods if not n))):  # fmt: skip
            most[key] = max(most[key], count)


def episodes(backend: str, n: int, kubectl: list[str], found: dict[str, str], wait: float) -> Any:
    """One ``envfarm run`` of ``n`` oracle episodes at concurrency ``n`` on ``backend``."""
    ns, registry = found["ENVFARM_SANDBOX_NAMESPACE"], found["ENVFARM_TEST_IMAGE_REGISTRY"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVFARM_SANDBOX")}
    if backend == "kubernetes":
        env |= {"KUBECONFIG": found["ENVFARM_TEST_KUBECONFIG"], "ENVFARM_SANDBOX_NAMESPACE": ns}
        env |= {"ENVFARM_SANDBOX_BACKEND": "kubernetes", "ENVFARM_IMAGE_REGISTRY": registry}
        waited = time.monotonic() + wait
        while free_cpu_m(kubectl) < 500 and time.monotonic() < waited:
            time.sleep(5)  # other users' pods hold the node's CPU requests
    figures: dict[str, Any] = {"free cpu": f"{free_cpu_m(kubectl)}m", "on node": 0, "waiting": 0}
    stop, in_ns = threading.Event(), [*kubectl, "-n", ns]
    poller = threading.Thread(target=pods_polled, args=(in_ns, stop, figures), daemon=True)
    with tempfile.TemporaryDirectory() as out:
        env[COUNTS_ENV] = f"{out}/counts.json"
        run = ["run", str(TASK), "--policy", "oracle", "--group-size", str(n)]
        run += ["--concurrency", str(n), "--out", f"{out}/run"]
        poller.start()
        start = time.perf_counter()
        sh(sys.executable, __file__, "--counted", *run, env=env)  # its failure ends the bench
        stop.set()
        figures["wall"] = time.perf_counter() - start
        lines = Path(f"{out}/run/trajectories.jsonl").read_text().splitlines()
        rewards = [(json.loads(line).get("reward") or {}).get("value") for line in lines]
        figures["requests"] = json.loads(Path(env[COUNTS_ENV]).read_text())
    return figures | {"per_min": n / figures["wall"] * 60, "ones": rewards.count(1.0)}


def main(args: argparse.Namespace) -> None:
    found = dict(line.split("=", 1) for line in sh(str(CLUSTER), "env").split())
    config = found["ENVFARM_TEST_KUBECONFIG"]
    kubectl = [f"{found['ENVFARM_K8S_BIN']}/kubectl", "--kubeconfig", config]
    ns = args.ns = found["ENVFARM_SANDBOX_NAMESPACE"] = f"envfarm-bench-{uuid.uuid4().hex[:8]}"
    load = [os.getloadavg()[0]]
    sh(*kubectl, "create", "namespace", ns)
    runs: dict[str, list[Any]] = {}
    try:
        sh(*kubectl, "label", "namespace", ns, "pod-security.kubernetes.io/enforce=baseline")
        sh(*kubectl, "-n", ns, "create", "serviceaccount", "envfarm-sandbox")
        while "/default" not in sh(*kubectl, "-n", ns, "get", "serviceaccounts", "-o", "name"):
            time.sleep(0.2)  # kubectl run's pod needs the namespace's default account
        requests, times = asyncio.run(pod_starts(args, kubectl, found))
        load.append(os.getloadavg()[0])
        report_pods(requests, times)
        for r in range(args.run_rounds):
            for n in args.concurrency:
                for backend in ("kubernetes", "docker")[:: 1 - 2 * (r % 2)]:
                    got = episodes(backend, n, kubectl, found, args.room_wait)
                    runs.setdefault(f"{backend} x{n}", []).append(got)
                    print(f"{backend} x{n}: {json.dumps(got)}", flush=True)
        load.append(os.getloadavg()[0])
    finally:
        sh(*kubectl, "delete", "namespace", ns, "--wait=false")
    print(json.dumps({"requests": requests, "times": times, "runs": runs, "load": load}))


def report_pods(requests: list[Counter[str]], times: Times) -> None:
    base = pct([t["total"] for t in times["kubectl run"]], 0.5)
    print(f"\n{'to a first exec':<30}{'p50':>8}{'p95':>8}  p50 / kubectl run's; p50 phases")
    for arm, got in times.items():
        p50, p95 = pct([t["total"] for t in got], 0.5), pct([t["total"] for t in got], 0.95)
        phases = [f"{k} {pct([t[k] for t in got], 0.5):.2f}" for k in got[0] if k != "total"]
        print(f"{arm:<30}{p50:>7.2f}s{p95:>7.2f}s  {p50 / base:.2f}x; {', '.join(phases)}")
    for label, counted in zip(("new backend", "same backend"), requests, strict=True):
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(counted.items()))
        print(f"requests per lifecycle, {label}: {sum(counted.values())} ({kinds})", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--counted"]:
        counted_cli(sys.argv[2:])
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--run-rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--request-ratio", type=float, default=0.5)
    parser.add_argument("--room-wait", type=float, default=900.0)
    main(parser.parse_args())
