"""The project's one-node cluster (scripts/k8s-cluster) from nothing to a pod's exec, with Docker
on the same machine and image as the baseline.

Measured in one run, against the cluster this script brings up (and takes down at the end,
unless it was already up):

- up: ``scripts/k8s-cluster up`` from nothing (binaries already built) to a Ready node whose
  cluster DNS answers; and a second ``up``, which must change nothing;
- push: envfarm's ``python-slim`` image tagged and pushed to the cluster's registry;
- pod ready: ``kubectl apply`` of a pod of that image to its Ready condition, the first one
  (which pulls the image) and then ``--pods`` more (median), against ``docker run -d`` of the
  same image to a running container;
- exec: ``kubectl exec`` of ``true`` (median of ``--execs``) against ``docker exec``; and one
  exec whose output (100,000 random bytes, counted) and exit code (3) must come back exactly;
- from a pod: the cluster's DNS name of the API server resolves to its service IP, and the API
  server answers the pod's service-account token there (TLS verified; RBAC's 403 on pods);
- down: ``scripts/k8s-cluster down``, then nothing of the cluster left (processes, network
  namespace, veth, mounts, cgroups, directories, host iptables rules).

Needs root (the cluster script does) and Docker. Prints a table and, last, one JSON object.

    python bench/k8s_cluster.py [--pods 5] [--execs 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import time
from pathlib import Path

from envfarm.sandbox.docker.images.task_images import ensure_recipe_image

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "k8s-cluster"
API_PROBE = """
import json, ssl, urllib.error, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
request = urllib.request.Request("https://kubernetes.default.svc/api/v1/namespaces/default/pods",
    headers={"Authorization": "Bearer " + open(sa + "/token").read()})
try:
    urllib.request.urlopen(request, context=ssl.create_default_context(cafile=sa + "/ca.crt"))
except urllib.error.HTTPError as error:
    print(error.code)
"""


def run(*command: str, stdin: str | None = None, check: bool = True) -> tuple[int, str, float]:
    start = time.perf_counter()
    result = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=900)
    elapsed = time.perf_counter() - start
    if check and result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return result.returncode, result.stdout, elapsed


def pod(name: str, image: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": image, "command": ["sleep", "infinity"]}],
            },
        }
    )


def leftovers() -> list[str]:
    checks = {
        "processes": "pgrep -a -f '[e]nvfarm-k8s' || true",
        "network namespace": "ip netns list | grep envfarm-k8s || true",
        "links": "ip -o link | grep envfarm-k8s || true",
        "mounts": "grep envfarm-k8s /proc/self/mountinfo || true",
        "cgroups": "ls -d /sys/fs/cgroup/*/envfarm-k8s 2>/dev/null || true",
        "directories": "ls -d /var/lib/envfarm-k8s /run/envfarm-k8s 2>/dev/null || true",
        "host iptables": "iptables-save | grep -E 'envfarm-k8s|KUBE-|CNI-' || true",
    }
    return [what for what, check in checks.items() if run("sh", "-c", check)[1].strip()]


def main(n_pods: int, n_execs: int) -> None:
    was_up = run(str(SCRIPT), "status", check=False)[0] == 0
    if was_up:
        raise SystemExit("the cluster is up: run scripts/k8s-cluster down first (this times up)")
    figures: dict[str, float | str | bool] = {}
    _, out, figures["up_s"] = run(str(SCRIPT), "up")
    kubeconfig = out.strip().splitlines()[-1]
    _, _, figures["up_again_s"] = run(str(SCRIPT), "up")
    found = dict(line.split("=", 1) for line in run(str(SCRIPT), "env")[1].splitlines())
    kubectl = [f"{found['ENVFARM_K8S_BIN']}/kubectl", "--kubeconfig", kubeconfig]
    try:
        local = asyncio.run(ensure_recipe_image("python-slim")).tag
        image = f"{found['ENVFARM_TEST_IMAGE_REGISTRY']}/envfarm/python-slim:bench"
        run("docker", "tag", local, image)
        _, _, figures["push_s"] = run("docker", "push", "-q", image)
        run("docker", "rmi", image)

        ready = []
        for i in range(n_pods + 1):
            start = time.perf_counter()
            run(*kubectl, "apply", "-f", "-", stdin=pod(f"bench-{i}", image))
            run(*kubectl, "wait", "--for=condition=Ready", f"pod/bench-{i}", "--timeout=300s")
            ready.append(time.perf_counter() - start)
        figures["pod_ready_first_s"], figures["pod_ready_s"] = (
            ready[0],
            statistics.median(ready[1:]),
        )
        docker_ready = []
        for _ in range(n_pods):
            start = time.perf_counter()
            container = run("docker", "run", "-d", "--rm", local, "sleep", "infinity")[1].strip()
            docker_ready.append(time.perf_counter() - start)
            run("docker", "rm", "-f", container)
        figures["docker_run_s"] = statistics.median(docker_ready)

        execs = [run(*kubectl, "exec", "bench-1", "--", "true")[2] for _ in range(n_execs)]
        figures["kubectl_exec_s"] = statistics.median(execs)
        container = run("docker", "run", "-d", "--rm", local, "sleep", "infinity")[1].strip()
        try:
            docker_execs = [run("docker", "exec", container, "true")[2] for _ in range(n_execs)]
        finally:
            run("docker", "rm", "-f", container)
        figures["docker_exec_s"] = statistics.median(docker_execs)
        code, out, _ = run(
            *kubectl, "exec", "bench-1", "--", "sh", "-c",
            "head -c 100000 /dev/urandom | wc -c; exit 3", check=False,
        )  # fmt: skip
        figures["exec_exact"] = code == 3 and out.strip() == "100000"

        resolve = (
            "import socket; print(socket.gethostbyname('kubernetes.default.svc.cluster.local'))"
        )
        figures["dns_from_pod"] = run(*kubectl, "exec", "bench-1", "--", "python3", "-c", resolve)[
            1
        ].strip()
        figures["api_from_pod"] = run(
            *kubectl, "exec", "-i", "bench-1", "--", "python3", "-", stdin=API_PROBE
        )[1].strip()
    finally:
        _, _, figures["down_s"] = run(str(SCRIPT), "down")
    figures["left_after_down"] = ", ".join(leftovers()) or "nothing"

    print(
        f"{'up from nothing':<28}{figures['up_s']:>8.1f} s  (again: {figures['up_again_s']:.1f} s)"
    )
    print(f"{'push python-slim':<28}{figures['push_s']:>8.1f} s")
    print(f"{'first pod Ready (pull)':<28}{figures['pod_ready_first_s']:>8.2f} s")
    ratio = figures["pod_ready_s"] / figures["docker_run_s"]  # type: ignore[operator]
    print(f"{'pod Ready':<28}{figures['pod_ready_s']:>8.2f} s  {ratio:.2f}x docker run")
    ratio = figures["kubectl_exec_s"] / figures["docker_exec_s"]  # type: ignore[operator]
    print(
        f"{'kubectl exec':<28}{figures['kubectl_exec_s'] * 1000:>8.0f} ms {ratio:.2f}x docker exec"
    )
    print(f"{'exec output and exit code':<28}{'exact' if figures['exec_exact'] else 'WRONG':>8}")
    print(f"{'DNS from a pod':<28}{figures['dns_from_pod']:>8}")
    print(f"{'API via service IP':<28}{figures['api_from_pod']:>8}")
    print(f"{'down':<28}{figures['down_s']:>8.1f} s  left: {figures['left_after_down']}")
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pods", type=int, default=5)
    parser.add_argument("--execs", type=int, default=10)
    args = parser.parse_args()
    main(args.pods, args.execs)
