"""One GRPO loop end to end on a CPU: a small real model trained with TRL on envfarm's tasks.

Two paths, each a few optimizer steps of the same model (Qwen2.5-Coder-0.5B-Instruct as
`vllm_setup.py` converts it: TRL knows its chat template's tool calls, SmolLM2's has none):

- ``env``: TRL's ``GRPOTrainer(environment_factory=...)`` with ``EnvfarmEnvironment``. The
  trainer samples with its own ``generate``, calls envfarm's tools over the step API
  (``/v1/openenv/TOKEN/ws``), and gets the reward graded in the clean room from
  ``get_reward()``. The loss is on the trainer's own token ids. Time in envfarm is the wall time
  covered by the environment's messages (reset, tools, submit and grading).
- ``async``: TRL's experimental ``AsyncGRPOTrainer`` with ``EnvfarmRolloutWorker``
  (``envfarm.integrations.trl``): envfarm runs the agent against a CPU vLLM in token mode, the
  worker turns each graded group into TRL's ``RolloutSample``s, and the loss is computed on
  envfarm's token ids and logprobs. The weight sync is the CPU recipe: TRL streams the
  parameters to a ``weight_transfer`` that saves them as safetensors and restarts vLLM on them;
  TRL then bumps its version, which the worker publishes with ``PUT /v1/policy-version``.
  TRL's tree attention calls a FlashAttention-3 kernel (GPU only), so the bench registers a
  PyTorch implementation of the same varlen, bottom-right causal attention under its name.

The bench starts its own ``envfarm serve`` (a data directory of its own, a token) and, for
``async``, its own vLLM, and stops both. Checks printed per path: rewards reached the trainer,
the loss was computed on the ids envfarm recorded (async), the version advanced and envfarm's
turns carry it (async), the trajectories are in envfarm's store, no container is left. The
last line is one JSON object.

Needs a virtualenv with ``trl torch transformers datasets accelerate`` and envfarm (``pip
install -e .``; ``envfarm.integrations.trl`` for ``async``), and for ``async`` the vLLM
virtualenv and model of ``vllm_setup.py`` (``python bench/vllm_server.py`` makes both)::

    python bench/trl_e2e.py --paths env,async --steps 2
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CACHE = Path("~/.cache/envfarm-bench").expanduser()
MODEL = "policy"
MANAGED = "io.envfarm.managed=true"
SERVE_LEFT: list[str] = []
"""Containers a stopped ``envfarm serve`` of this bench left behind."""
HINT = (
    "You work in a Linux sandbox through the tools bash, read_file, write_file, edit_file and "
    "submit. Do the task below, then call submit.\n\n"
)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def http(url: str, body: Any = None, *, method: str = "GET", token: str | None = None,
         timeout: float = 60) -> Any:  # fmt: skip
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        raw = answer.read()
    return json.loads(raw) if raw else None


def containers_of(pid: int) -> list[str]:
    """The containers envfarm's process ``pid`` owns (other envfarm processes may be running)."""
    owner = f"io.envfarm.owner={socket.gethostname()}:{pid}"
    command = ["docker", "ps", "-a", "--filter", f"label={MANAGED}", "--filter",
               f"label={owner}", "--format", "{{.Names}}"]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return out.split()


def union_s(spans: list[tuple[float, float]]) -> float:
    """Wall time covered by possibly overlapping ``(start, end)`` spans."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


class EnvfarmServe:
    """``envfarm serve`` on loopback (``--port 0``), its own data directory and token."""

    def __init__(self, tasks: Path, data: Path, concurrency: int, logs: Path) -> None:
        self.token = secrets.token_hex(12)
        command = [sys.executable, "-m", "envfarm", "serve", "--host", "127.0.0.1", "--port",
                   "0", "--tasks", str(tasks), "--data-dir", str(data), "--token", self.token,
                   "--concurrency", str(concurrency)]  # fmt: skip
        self.log_path = logs / "envfarm-serve.log"
        self.output = self.log_path.open("w")
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, start_new_session=True)  # fmt: skip
        self.url = ""
        assert self.process.stdout is not None
        deadline = time.monotonic() + 180
        for line in self.process.stdout:
            self.output.write(line)
            found = re.search(r"serving on (http://\S+)", line)
            if found:
                self.url = found.group(1).rstrip("/")
                break
            if time.monotonic() > deadline:
                break
        if not self.url:
            self.stop()
            raise SystemExit(f"envfarm serve did not start: see {self.log_path}")
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.write(line)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        return http(f"{self.url}{path}", body, method=method, token=self.token)

    def trajectories(self, job_id: str) -> list[dict[str, Any]]:
        page = self.call("GET", f"/v1/jobs/{job_id}/groups?after=0&limit=1000&consumer=bench")
        return [t for group in page["groups"] for t in group["trajectories"]]

    def stop(self) -> int:
        """Stop the server; its exit status (what it left in Docker goes to SERVE_LEFT)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=180)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        time.sleep(2)
        SERVE_LEFT.extend(containers_of(self.process.pid))
        return self.process.returncode


class VLLMServer:
    """A CPU vLLM (``vllm_setup.py``'s virtualenv) serving ``model_dir`` as ``policy``."""

    def __init__(self, venv: Path, args: argparse.Namespace, logs: Path) -> None:
        self.venv, self.args, self.logs = venv, args, logs
        self.url = f"http://127.0.0.1:{args.vllm_port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts: list[float] = []

    def start(self, model_dir: Path) -> float:
        command = [str(self.venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
                   "--model", str(model_dir), "--served-model-name", MODEL,
                   "--host", "127.0.0.1", "--port", str(self.args.vllm_port),
                   "--dtype", "bfloat16", "--max-model-len", str(self.args.max_model_len),
                   "--max-num-seqs", "8", "--enable-auto-tool-choice",
                   "--tool-call-parser", "hermes", "--enforce-eager"]  # fmt: skip
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2"}
        env.pop("PYTHONPATH", None)
        out = (self.logs / f"vllm-{len(self.starts) + 1}.log").open("wb")
        started = time.monotonic()
        self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)  # fmt: skip
        while time.monotonic() < started + 900:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.process.returncode}: see {out.name}")
            try:
                if http(f"{self.url}/v1/models", timeout=5)["data"]:
                    seconds = time.monotonic() - started
                    self.starts.append(seconds)
                    log(f"vLLM up on {model_dir.name} after {seconds:.0f}s")
                    return seconds
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(1)
        self.stop()
        raise RuntimeError("vLLM did not answer within 900 s")

    def stop(self) -> None:
        if self.process is None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None


def task_dir(args: argparse.Namespace, root: Path) -> Path:
    tasks = root / "tasks"
    tasks.mkdir(parents=True)
    for name in args.tasks:
        source = Path(name) if Path(name).is_absolute() else REPO / name
        shutil.copytree(source, tasks / source.name)
    return tasks


def history(trainer: Any) -> list[dict[str, Any]]:
    return [dict(entry) for entry in trainer.state.log_history if "loss" in entry]


def model_dir(args: argparse.Namespace) -> Path:
    found: Path = args.model_dir
    if not (found / "config.json").exists():
        raise SystemExit(f"no model in {found}: run bench/vllm_server.py first, or --model-dir")
    return found


# --- path 1: environment_factory -------------------------------------------------------------


def run_env(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from envfarm.integrations.trl_environment import EnvfarmEnvironment

    spans: list[tuple[float, float]] = []
    kinds: dict[str, float] = {}
    jobs: list[str] = []
    rewards: list[float | None] = []

    class TimedEnvironment(EnvfarmEnvironment):
        """``EnvfarmEnvironment`` timing each message it exchanges with envfarm."""

        def _send(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
            started = time.monotonic()
            try:
                answer = super()._send(kind, data)
            finally:
                ended = time.monotonic()
                spans.append((started, ended))
                name = data.get("tool", kind) if kind == "step" else kind
                kinds[name] = kinds.get(name, 0.0) + ended - started
            if kind == "reset":
                jobs.append(str(answer["observation"]["job_id"]))
            return answer

        def get_reward(self) -> float | None:
            reward = super().get_reward()
            rewards.append(reward)
            return reward

    serve = EnvfarmServe(task_dir(args, root), root / "data", args.num_generations, root)
    try:
        task_ids = [t["id"] for t in serve.call("GET", "/v1/tasks")["tasks"]]
        rows = [{"prompt": [{"role": "user", "content": HINT}], "task": task_ids[i % len(task_ids)]}
                for i in range(args.steps)]  # fmt: skip
        config = GRPOConfig(
            output_dir=str(root / "trainer"),
            use_cpu=True,
            max_steps=args.steps,
            per_device_train_batch_size=args.num_generations,
            num_generations=args.num_generations,
            max_completion_length=args.max_tokens * args.max_turns,
            max_tool_calling_iterations=args.max_turns,
            learning_rate=args.learning_rate,
            beta=0.0,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            seed=args.seed,
            model_init_kwargs={"dtype": "float32"},
        )
        trainer = GRPOTrainer(
            model=str(model_dir(args)),
            args=config,
            train_dataset=Dataset.from_list(rows),
            environment_factory=partial(TimedEnvironment, serve.url, token=serve.token),
        )
        log(f"env: training {args.steps} steps of {args.num_generations} rollouts")
        started = time.monotonic()
        trainer.train()
        wall = time.monotonic() - started
        steps = history(trainer)
        found = [t for job in jobs for t in serve.trajectories(job)]
    finally:
        code = serve.stop()
    in_envfarm = union_s(spans)
    rewarded = [r for r in rewards if r is not None]
    reward_keys = [k for k in steps[0] if k.startswith("rewards/")] if steps else []
    result: dict[str, Any] = {
        "steps": len(steps),
        "wall_s": round(wall, 1),
        "envfarm_s": round(in_envfarm, 1),
        "envfarm_by_message_s": {k: round(v, 1) for k, v in sorted(kinds.items())},
        "trainer_s": round(wall - in_envfarm, 1),
        "envfarm_share": round(in_envfarm / wall, 3),
        "envfarm_per_trainer_s": round(in_envfarm / max(wall - in_envfarm, 1e-9), 3),
        "rollouts": len(jobs),
        "rewards": rewards,
        "loss": [s.get("loss") for s in steps],
        "trainer_reward": [s.get("reward") for s in steps],
        "trainer_reward_keys": reward_keys,
        "tool_calls": [s.get("tools/call_frequency") for s in steps],
        "stored": len(found),
        "stored_rewards": [t["reward"]["value"] for t in found],
        "stored_tool_calls": sum(len(turn["tool_results"]) for t in found for turn in t["turns"]),
        "serve_exit": code,
    }
    problems = []
    if len(steps) != args.steps:
        problems.append(f"{len(steps)} steps logged, not {args.steps}")
    if not rewarded or not reward_keys:
        problems.append("no graded reward reached the trainer")
    if len(found) != len(jobs):
        problems.append(f"{len(found)} trajectories in the store for {len(jobs)} sessions")
    if sorted(map(str, result["stored_rewards"])) != sorted(map(str, rewards)):
        problems.append("the trainer's rewards are not the stored ones")
    result["problems"] = problems
    return result


# --- path 2: the async rollout worker --------------------------------------------------------


def cpu_tree_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, *,
                       tree_kv_index: Any, tree_cu_seqlens_q: Any, tree_cu_seqlens_k: Any,
                       tree_max_seqlen_q: int, tree_max_seqlen_k: int,
                       scaling: float | None = None, sliding_window: int | None = None,
                       softcap: float | None = None, **_: Any) -> tuple[Any, None]:  # fmt: skip
    """TRL's ``tree_attention`` (``packing.py``) in PyTorch: each segment's queries attend to the
    K/V rows of its root-to-segment path, causal from the bottom right, as
    ``flash_attn_varlen_func(causal=True)`` does; ``(1, tokens, heads, dim)`` out."""
    import torch
    import torch.nn.functional as F

    if sliding_window or softcap:
        raise NotImplementedError("the CPU tree attention has no sliding window or softcap")
    q = query[0]
    k = key[0].index_select(1, tree_kv_index)
    v = value[0].index_select(1, tree_kv_index)
    bounds_q, bounds_k = tree_cu_seqlens_q.tolist(), tree_cu_seqlens_k.tolist()
    parts = []
    for i in range(len(bounds_q) - 1):
        qs = q[:, bounds_q[i] : bounds_q[i + 1]]
        ks, vs = k[:, bounds_k[i] : bounds_k[i + 1]], v[:, bounds_k[i] : bounds_k[i + 1]]
        lq, lk = qs.shape[1], ks.shape[1]
        mask = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril(lk - lq)
        parts.append(F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, scale=scaling,
                                                    enable_gqa=True))  # fmt: skip
    return torch.cat(parts, dim=1).transpose(0, 1).unsqueeze(0), None


class RestartTransfer:
    """TRL's ``WeightTransferProtocol`` on a CPU: the streamed parameters are saved as a
    safetensors checkpoint and vLLM is restarted on it. The first sync (TRL's cold sync, before
    any update) finds the server on these weights already and only drains the stream."""

    def __init__(self, vllm: VLLMServer, base: Path, out: Path) -> None:
        self.vllm, self.base, self.out = vllm, base, out
        self.syncs: list[dict[str, float]] = []

    def init_weight_transfer(self) -> None:
        pass

    def pause(self) -> None:
        pass

    def send_weights(self, iterator: Iterator[tuple[str, Any]]) -> None:
        import torch
        from safetensors.torch import save_file

        started = time.monotonic()
        if not self.syncs:
            for _ in iterator:
                pass
            self.syncs.append({"save_s": 0.0, "restart_s": 0.0, "total_s": 0.0})
            return
        target = self.out / f"policy-v{len(self.syncs) + 1}"
        target.mkdir(parents=True)
        for item in self.base.iterdir():
            if item.suffix != ".safetensors" and item.is_file():
                shutil.copy2(item, target / item.name)
        tensors = {name: p.detach().to(torch.bfloat16).contiguous() for name, p in iterator}
        save_file(tensors, str(target / "model.safetensors"), metadata={"format": "pt"})
        saved = time.monotonic()
        self.vllm.stop()
        shutil.rmtree(self.out / f"policy-v{len(self.syncs) - 1}", ignore_errors=True)
        restart = self.vllm.start(target)
        self.syncs.append({"save_s": round(saved - started, 1), "restart_s": round(restart, 1),
                           "total_s": round(time.monotonic() - started, 1)})  # fmt: skip

    def resume(self) -> None:
        pass

    def destroy(self) -> None:
        pass


class TakenQueue(queue.Queue[Any]):
    """The worker's rollout buffer, keeping what the trainer took from it."""

    def __init__(self, maxsize: int) -> None:
        super().__init__(maxsize)
        self.taken: list[Any] = []

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        item = super().get(block, timeout)
        self.taken.append(item)
        return item


def run_async(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    from datasets import Dataset
    from transformers import AttentionInterface
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer, async_grpo_trainer
    from trl.experimental.async_grpo.packing import TREE_ATTENTION

    from envfarm.integrations.trl import EnvfarmRolloutWorker

    # TRL looks the device's peak FLOPs up with torch.cuda.get_device_name (MFU metrics), which
    # raises without a GPU; None is its own answer for an unknown device.
    async_grpo_trainer.get_peak_flops_per_device = lambda *_: None
    base = model_dir(args)
    venv: Path = args.vllm_venv
    vllm = VLLMServer(venv, args, root)
    transfer = RestartTransfer(vllm, base, root / "weights")
    serve = EnvfarmServe(task_dir(args, root), root / "data", args.num_generations, root)
    trainer_s: list[float] = []
    try:
        first_start = vllm.start(base)
        task_ids = [t["id"] for t in serve.call("GET", "/v1/tasks")["tasks"]]
        job = {
            "tasks": task_ids,
            "policy": {"base_url": f"{vllm.url}/v1", "model": MODEL, "token_mode": True},
            "group_size": args.num_generations,
            # no seed: the worker submits the job again and again, and a seed would sample
            # the same rollouts in every one of them
            "sampling": {"max_tokens": args.max_tokens, "temperature": 1.0},
            "max_turns": args.max_turns,
            "concurrency": args.num_generations,
            "allow_unjudged": True,
        }
        worker = EnvfarmRolloutWorker(serve.url, job, token=serve.token,
                                      max_staleness=args.max_staleness)  # fmt: skip
        # bounded, so the rollouts wait for the trainer rather than run ahead on two cores
        worker.rollout_buffer = TakenQueue(maxsize=2 * args.num_generations)
        config = AsyncGRPOConfig(
            output_dir=str(root / "trainer"),
            use_cpu=True,
            max_steps=args.steps,
            per_device_train_batch_size=args.num_generations,
            token_budget=0,
            weight_sync_steps=1,
            max_staleness=args.max_staleness,
            learning_rate=args.learning_rate,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            seed=args.seed,
            vllm_server_base_url=vllm.url,
            model_init_kwargs={"dtype": "float32"},
        )

        class TimedTrainer(AsyncGRPOTrainer):  # type: ignore[misc]
            def training_step(self, model: Any, inputs: Any, num_items: Any = None) -> Any:
                started = time.monotonic()
                try:
                    return super().training_step(model, inputs, num_items)
                finally:
                    trainer_s.append(time.monotonic() - started)

        placeholder = Dataset.from_dict({"prompt": [[{"role": "user", "content": ""}]]})
        trainer = TimedTrainer(model=str(base), args=config, train_dataset=placeholder,
                               rollout_worker=worker, weight_transfer=transfer)  # fmt: skip
        AttentionInterface.register(TREE_ATTENTION, cpu_tree_attention)
        log(f"async: training {args.steps} steps of {args.num_generations}-rollout groups")
        started = time.monotonic()
        trainer.train()
        wall = time.monotonic() - started
        worker.stop()
        steps = history(trainer)
        version = trainer.model_version
        taken: list[Any] = worker.rollout_buffer.taken
        job_ids = sorted({j["id"] for j in serve.call("GET", "/v1/jobs")["jobs"]})
        for job_id in job_ids:
            if serve.call("GET", f"/v1/jobs/{job_id}")["status"] in {"queued", "running"}:
                serve.call("POST", f"/v1/jobs/{job_id}/cancel")
        found = [t for job_id in job_ids for t in serve.trajectories(job_id)]
    finally:
        code = serve.stop()
        vllm.stop()
    run = {"steps": steps, "wall": wall, "trainer_s": trainer_s, "syncs": transfer.syncs,
           "first_start": first_start, "taken": taken, "found": found, "version": version,
           "job_ids": job_ids, "code": code}  # fmt: skip
    return async_result(args, run)


def ids_of(trajectory: dict[str, Any]) -> list[list[int]]:
    """The sequences a trajectory's turns make (each turn's prompt plus its completion), as
    envfarm recorded them."""
    return [list(turn["prompt_token_ids"] or []) + list(turn["completion_token_ids"] or [])
            for turn in trajectory["turns"]]  # fmt: skip


def counts(values: Iterable[Any]) -> dict[str, int]:
    found: dict[str, int] = {}
    for value in values:
        found[str(value)] = found.get(str(value), 0) + 1
    return found


def async_result(args: argparse.Namespace, r: dict[str, Any]) -> dict[str, Any]:
    steps, found, taken = r["steps"], r["found"], r["taken"]
    wall, train = r["wall"], sum(r["trainer_s"])
    syncs = r["syncs"]
    sync_s = sum(s["total_s"] for s in syncs)
    sequences = {tuple(seq) for t in found for seq in ids_of(t)}
    exact = sum(1 for s in taken if tuple(int(x) for x in s.input_ids) in sequences)
    turns = [turn for t in found for turn in t["turns"]]
    model_s = sum(turn.get("latency_s") or 0.0 for turn in turns)
    episode_s = sum(t["timings"].get("total_s") or 0.0 for t in found)
    versions = counts(turn["policy_version"] for turn in turns)
    taken_versions = counts(s.model_version for s in taken)
    result: dict[str, Any] = {
        "steps": len(steps),
        "wall_s": round(wall, 1),
        "trainer_step_s": round(train, 1),
        "weight_sync_s": round(sync_s, 1),
        "weight_syncs": syncs,
        "vllm_first_start_s": round(r["first_start"], 1),
        "waiting_for_rollouts_s": round(wall - train - sync_s, 1),
        "episodes": len(found),
        "episodes_valid": sum(1 for t in found if t["reward"]["valid"]),
        "episode_s": round(episode_s, 1),
        "model_s": round(model_s, 1),
        "envfarm_s": round(episode_s - model_s, 1),
        "envfarm_share_of_episodes": round((episode_s - model_s) / max(episode_s, 1e-9), 3),
        "envfarm_per_trainer_step_s": round((episode_s - model_s) / max(train, 1e-9), 3),
        "rewards": counts(t["reward"]["value"] for t in found),
        "advantages": counts(t.get("advantage") for t in found),
        "loss": [s.get("loss") for s in steps],
        "trainer_reward": [s.get("reward") for s in steps],
        "samples_taken": len(taken),
        "samples_on_envfarm_ids": exact,
        "sample_versions": taken_versions,
        "turn_versions": versions,
        "trainer_version": r["version"],
        "jobs": len(r["job_ids"]),
        "serve_exit": r["code"],
    }
    problems = []
    if len(steps) != args.steps:
        problems.append(f"{len(steps)} steps logged, not {args.steps}")
    if not taken or exact != len(taken):
        problems.append(f"{exact} of {len(taken)} samples are on envfarm's recorded ids")
    if r["version"] < args.steps:
        problems.append(f"the trainer's version is {r['version']}")
    if len([v for v in versions if v not in {"None", "0"}]) < 2:
        problems.append(f"envfarm's turns carry versions {versions}, not an advancing version")
    if not any(s.get("reward") is not None for s in steps):
        problems.append("no reward reached the trainer's logs")
    result["problems"] = problems
    return result


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", default="env,async", help="env, async or both")
    parser.add_argument("--workdir", type=Path, default=CACHE / "trl-e2e")
    parser.add_argument("--model-dir", type=Path,
                        default=CACHE / "vllm" / "qwen2.5-coder-0.5b-instruct")  # fmt: skip
    parser.add_argument("--vllm-venv", type=Path, default=CACHE / "vllm" / "venv")
    parser.add_argument("--vllm-port", type=int, default=8195)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--tasks", nargs="+", default=["tasks/word-count-cli"])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--num-generations", type=int, default=4, help="rollouts a group")
    parser.add_argument("--max-tokens", type=int, default=128, help="tokens a model turn")
    parser.add_argument("--max-turns", type=int, default=3, help="model turns an episode")
    parser.add_argument("--max-staleness", type=int, default=4)
    parser.add_argument("--learning-rate", type=float, default=1e-6)
    parser.add_argument("--seed", type=int, default=7)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the servers are stopped on the way
    args.workdir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="run-", dir=args.workdir))
    results: dict[str, Any] = {}
    for path in args.paths.split(","):
        root = scratch / path
        root.mkdir()
        run = {"env": run_env, "async": run_async}[path]
        try:
            results[path] = run(args, root)
        except (RuntimeError, OSError, urllib.error.URLError, ValueError) as exc:
            traceback.print_exc()
            results[path] = {"problems": [f"{type(exc).__name__}: {exc}"]}
        print(json.dumps({path: results[path]}, indent=2, default=str), flush=True)
    left = sorted(SERVE_LEFT)
    summary = {"bench": "trl_e2e", "runs_in": str(scratch), "containers_left": left,
               "results": results}  # fmt: skip
    problems = [p for r in results.values() for p in r.get("problems", [])]
    problems += [f"containers left: {left}"] if left else []
    summary["problems"] = problems
    print(json.dumps(summary, default=str))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
