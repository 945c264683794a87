"""2,000 warm environments through ``envfarm operator`` on kwok's simulated nodes.

Needs the project's cluster with simulated nodes (``ENVFARM_K8S_KWOK_NODES=8
scripts/k8s-cluster up``): pods that tolerate ``kwok.x-k8s.io/node=fake:NoSchedule`` and select
``type: kwok`` are Running and Ready at once, with no container, so what is measured is the
control plane and the operator, not the kubelet. The cluster's EnvPool CRD must declare
``nodeSelector`` and ``tolerations`` (``manifests/base/crds/envpools.yaml``). In one run, in a
namespace of its own:

- baseline: ``kubectl create -f`` of ``--replicas`` pods in Lists of ``--batch``, the same pod
  the operator makes (the EnvPool template of ``tasks/word-count-cli``, the same placement),
  until all are Ready; then ``kubectl delete`` until all are gone;
- operator: ``envfarm operator`` as a process (``--tasks tasks``), one EnvPool of
  ``--replicas`` with the kwok toleration and nodeSelector, until ``status.readyReplicas`` is
  ``--replicas``; then ``kubectl scale --replicas=0`` until every pod is gone.

For each: seconds, pods created per second, the API server's requests (``apiserver_request_total``
from ``/metrics`` before and after, by verb, and per second: every client's, other users' of
the cluster too), and the operator's own requests (counted in its process around
``RestKubeApi._send``; its two watches are not requests there). "Lost" is checked from a watch:
every pod uid ever seen, the pods that exist at the end, Ready or not, and the pool's status.

    python bench/k8s_kwok.py [--replicas 2000] [--batch 500] [--request-ratio 0.1]
                             [--skip-baseline] [--namespace envfarm-kwok-bench]

Prints a table and, last, one JSON object. The namespace is deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from envfarm.k8s.api import ENV_POOLS, PODS, KubeApi, KubeObject
from envfarm.k8s.informer import Informer
from envfarm.k8s.kubeconfig import load_kubeconfig
from envfarm.k8s.pools import POOL_LABEL, pod_ready
from envfarm.k8s.rest import RestKubeApi

ROOT = Path(__file__).resolve().parents[1]
TASK = "envfarm/word-count-cli"
POOL = "kwok-pool"
TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
SELECTOR = {"type": "kwok"}
METRIC = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
# Runs `envfarm operator` counting its requests; writes the counts to $COUNTS on exit.
LAUNCHER = """
import atexit, collections, json, os
from envfarm.k8s.rest import RestKubeApi
counts = collections.Counter()
send = RestKubeApi._send
async def counted(self, method, url, *args, **kwargs):
    counts["LIST" if method == "GET" and "labelSelector=" in url else method] += 1
    return await send(self, method, url, *args, **kwargs)
RestKubeApi._send = counted
atexit.register(lambda: open(os.environ["COUNTS"], "w").write(json.dumps(counts)))
from envfarm.cli.main import main
main()
"""


def cluster_env() -> dict[str, str]:
    out = subprocess.run(
        [ROOT / "scripts" / "k8s-cluster", "env"], capture_output=True, text=True, check=True
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


class Kubectl:
    def __init__(self, env: dict[str, str]) -> None:
        self.base = [f"{env['ENVFARM_K8S_BIN']}/kubectl", "--kubeconfig"]
        self.base.append(env["ENVFARM_TEST_KUBECONFIG"])

    def __call__(self, *args: str, stdin: str | None = None) -> str:
        done = subprocess.run([*self.base, *args], input=stdin, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"kubectl {' '.join(args[:4])}: {done.stderr.strip()}")
        return done.stdout

    def requests(self) -> Counter[str]:
        by_verb: Counter[str] = Counter()
        for line in self("get", "--raw", "/metrics").splitlines():
            if m := METRIC.match(line):
                verb = re.search(r'verb="([^"]*)"', m["labels"])
                by_verb[verb[1] if verb else "?"] += int(float(m["value"]))
        return by_verb


class Watched:
    """Every pod of the namespace from one watch: uids ever added, what exists now."""

    def __init__(self, api: KubeApi, namespace: str, selector: str) -> None:
        self.uids: set[str] = set()
        self.informer = Informer(api, PODS, namespace, label_selector=selector, on_event=self.seen)

    def seen(self, kind: str, pod: KubeObject) -> None:
        self.uids.add(pod["metadata"]["uid"])

    @property
    def pods(self) -> list[KubeObject]:
        return list(self.informer.cache.values())

    def ready(self) -> int:
        return sum(1 for pod in self.pods if pod_ready(pod))

    async def until(self, done: Any, timeout_s: float) -> float:
        start = time.monotonic()
        while not done():
            if time.monotonic() - start > timeout_s:
                raise TimeoutError(f"not after {timeout_s} s: {len(self.pods)} pods")
            await asyncio.sleep(0.1)
        return time.monotonic() - start


def delta(after: Counter[str], before: Counter[str], seconds: float) -> dict[str, Any]:
    verbs = {verb: after[verb] - before[verb] for verb in after if after[verb] > before[verb]}
    total = sum(verbs.values())
    return {"by_verb": verbs, "total": total, "per_s": round(total / seconds, 1)}


async def template(request_ratio: float) -> KubeObject:
    """The pod the operator makes for the pool, rendered in this process the same way."""
    from envfarm.cli.operator import _pool_specs
    from envfarm.cli.serve import _load_tasks
    from envfarm.sandbox.kubernetes.pooltemplate import TaskTemplates

    specs = _pool_specs({k: v for k, v in _load_tasks(ROOT / "tasks").items() if k == TASK})
    pool = pool_object("baseline", 0, request_ratio)
    return await TaskTemplates(specs)(pool)


def pool_object(name: str, replicas: int, request_ratio: float) -> KubeObject:
    return {
        "apiVersion": "envfarm.dev/v1alpha1",
        "kind": "EnvPool",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "taskRef": {"name": TASK},
            "replicas": replicas,
            "requestRatio": request_ratio,
            "nodeSelector": SELECTOR,
            "tolerations": [TOLERATION],
        },
    }


async def baseline(args: argparse.Namespace, kubectl: Kubectl, api: KubeApi) -> dict[str, Any]:
    pod = await template(args.request_ratio)
    labels = {**pod["metadata"]["labels"], "bench": "baseline"}
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"base-{i}", "labels": labels},
            "spec": pod["spec"],
        }
        for i in range(args.replicas)
    ]
    watched = Watched(api, args.namespace, "bench=baseline")
    watched.informer.start()
    await watched.informer.synced.wait()
    before, start = kubectl.requests(), time.monotonic()
    for i in range(0, len(pods), args.batch):
        listing = {"apiVersion": "v1", "kind": "List", "items": pods[i : i + args.batch]}
        await asyncio.to_thread(kubectl, "-n", args.namespace, "create", "-f", "-",
                                stdin=json.dumps(listing))  # fmt: skip
    created_s = time.monotonic() - start
    await watched.until(lambda: watched.ready() == args.replicas, 600)
    ready_s, after = time.monotonic() - start, kubectl.requests()
    result = {
        "ready_s": round(ready_s, 1),
        "created_s": round(created_s, 1),
        "pods_per_s": round(args.replicas / ready_s, 1),
        "api": delta(after, before, ready_s),
        "uids_seen": len(watched.uids),
    }
    before, start = after, time.monotonic()
    kubectl("-n", args.namespace, "delete", "pods", "-l", "bench=baseline", "--wait=false")
    await watched.until(lambda: not watched.pods, 600)
    result["gone_s"] = round(time.monotonic() - start, 1)
    result["delete_api"] = delta(kubectl.requests(), before, time.monotonic() - start)
    await watched.informer.stop()
    return result


async def operator(args: argparse.Namespace, kubectl: Kubectl, api: KubeApi) -> dict[str, Any]:
    env = cluster_env()
    counts = Path(tempfile.mkdtemp(prefix="kwok-bench-")) / "counts.json"
    command = [sys.executable, "-c", LAUNCHER, "operator", "--namespace", args.namespace,
               "--kubeconfig", env["ENVFARM_TEST_KUBECONFIG"], "--api", "http://127.0.0.1:1",
               "--tasks", str(ROOT / "tasks")]  # fmt: skip
    log = open(counts.with_name("operator.log"), "w")  # noqa: SIM115 - the process writes it
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "COUNTS": str(counts), "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    watched = Watched(api, args.namespace, f"{POOL_LABEL}={POOL}")
    watched.informer.start()
    await watched.informer.synced.wait()
    await asyncio.sleep(args.settle_s)  # the operator lists and watches
    pool = pool_object(POOL, args.replicas, args.request_ratio)
    pool["metadata"]["namespace"] = args.namespace
    status: dict[str, Any] = {}

    def pool_ready() -> bool:
        return bool(int(status.get("readyReplicas") or 0) >= args.replicas)

    async def follow() -> None:
        while not pool_ready():
            await asyncio.sleep(0.5)
            status.update((await api.get(ENV_POOLS, args.namespace, POOL)).get("status") or {})

    try:
        before, start = kubectl.requests(), time.monotonic()
        kubectl("apply", "-f", "-", stdin=json.dumps(pool))
        await asyncio.wait_for(follow(), 900)
        ready_s, after = time.monotonic() - start, kubectl.requests()
        await asyncio.sleep(args.settle_s)  # would a late pass create more?
        result = {
            "ready_s": round(ready_s, 1),
            "pods_per_s": round(args.replicas / ready_s, 1),
            "api": delta(after, before, ready_s),
            "uids_seen": len(watched.uids),
            "pods": len(watched.pods),
            "pods_ready": watched.ready(),
            "status_replicas": status.get("replicas"),
        }
        before, start = after, time.monotonic()
        kubectl("-n", args.namespace, "scale", f"envpool/{POOL}", "--replicas=0")
        await watched.until(lambda: not watched.pods, 600)
        result["gone_s"] = round(time.monotonic() - start, 1)
        result["scale_down_api"] = delta(kubectl.requests(), before, time.monotonic() - start)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
        log.close()
        await watched.informer.stop()
    result["operator_requests"] = json.loads(counts.read_text()) if counts.exists() else None
    return result


def table(results: dict[str, Any]) -> None:
    print("| arm | to all Ready | pods/s | API requests (per s) | to all gone |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for arm, r in results.items():
        if isinstance(r, dict) and "ready_s" in r:
            api = f"{r['api']['total']} ({r['api']['per_s']}/s)"
            print(f"| {arm} | {r['ready_s']} s | {r['pods_per_s']} | {api} | {r['gone_s']} s |")


async def main(args: argparse.Namespace) -> dict[str, Any]:
    env = cluster_env()
    kubectl = Kubectl(env)
    kubectl("create", "namespace", args.namespace)
    results: dict[str, Any] = {"replicas": args.replicas, "load_before": os.getloadavg()}
    api = RestKubeApi(await load_kubeconfig(Path(env["ENVFARM_TEST_KUBECONFIG"])))
    try:
        kubectl("label", "namespace", args.namespace, "pod-security.kubernetes.io/enforce=baseline")
        kubectl("-n", args.namespace, "create", "serviceaccount", "envfarm-sandbox")
        if not args.skip_baseline:
            results["kubectl"] = await baseline(args, kubectl, api)
        results["operator"] = await operator(args, kubectl, api)
        if "kubectl" in results:
            results["ratio_ready"] = round(
                results["operator"]["ready_s"] / results["kubectl"]["ready_s"], 2
            )
    finally:
        results["load_after"] = os.getloadavg()
        await api.close()
        kubectl("delete", "namespace", args.namespace, "--wait=false")
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--request-ratio", type=float, default=0.1)
    parser.add_argument("--namespace", default="envfarm-kwok-bench")
    parser.add_argument("--settle-s", type=float, default=3.0)
    parser.add_argument("--skip-baseline", action="store_true")
    out = asyncio.run(main(parser.parse_args()))
    table(out)
    print(json.dumps(out))
