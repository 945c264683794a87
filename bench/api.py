"""Delivery throughput of the REST API, and the controller's memory per 1,000 queued episodes.

A store is filled with completed groups of realistic trajectories (token ids, logprobs, tool
output; ``SHAPES``) by the store's own lease/record path, then ``envfarm serve --no-worker``
serves it as a real process on loopback. Measured in one run:

- the baseline: the same groups read straight from the store, in this process, as a JSON
  answer reads them (``Store.delivered(forms="json")``: each trajectory's JSON text, not its
  packed copy);
- long-poll: ``GET /v1/jobs/{id}/groups`` pages with background acks, through
  ``envfarm.client``, in the JSON form (parsed into models, and read lazily as a trainer that
  wants rewards and completion token ids as buffers reads it, ``token_buffers``) and in
  compact forms (packed JSON, packed NDJSON, Arrow), packed NDJSON also with gzip and zstd;
- streaming: the server-sent-event variant of the same route, JSON (models, lazy) and packed;
- the client's parse alone: the same trainer read of the JSON and packed forms in this process,
  from bytes read out of the store untimed, with no HTTP and no server. A delivery through a
  client that parses can be no faster, so its ratio is the ceiling of that form's;
- memory: the server's resident memory with one job of ``--queued`` queued episodes against
  an empty store, per 1,000 episodes (and the database's bytes per 1,000 episodes).

Every mode is run once untimed first (the server's first answers import encoders and warm the
store's cache), then ``--rounds`` rounds, each measuring every mode in an order rotated by one
per round, each mode as a fresh consumer and each right after a baseline read of its own. A
mode's ratio is its rate over that baseline's (the store read's rate swings by a third from
one second to the next on a shared machine, so a baseline read once a round made the ratios
swing with it); the table shows each mode's median rate and median ratio and the median of all
baseline reads, so a minute of the machine's load lands on one round's figures, not on one
mode's.

Prints a table and, last, one JSON object.

    python bench/api.py [--groups 500] [--group-size 4] [--rounds 3] [--queued 100000] [--db URL]
                        [--shape agent|flat]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from envfarm.api.encodings import group_parts
from envfarm.client import EnvfarmClient
from envfarm.client.lazy import LazyTrajectory, json_group
from envfarm.controller.groups import finalize_group
from envfarm.models.jobs import JobPolicy, JobRequest
from envfarm.models.trajectory import Provenance, Reward, ToolResult, Trajectory, Turn
from envfarm.store.leases import Lease
from envfarm.store.store import Store
from envfarm.store.views import Forms

TURNS = 8
SHAPES = ("agent", "flat")
"""``agent``: an agent session as a model server reports it. Token ids drawn over a 151,936-id
vocabulary, logprobs float32 values, and each turn's prompt the turn before's prompt and
completion followed by 30 tokens of tool output, so the compact layout keeps only those 30 (120
prompt tokens, then 50 completion tokens a turn; about 40 KB of JSON). Every trajectory's
tokens are its own draw, so compression finds no repeats across trajectories. ``flat``: the
shape of the figures recorded before the agent shape, 600 prompt and 150 completion tokens a
turn with ids below 750, every logprob -0.25, no prompt extending another, and the same arrays
in every trajectory (about 39 KB of JSON, and a packed form larger than the JSON, since small
ids print short and no prompt compacts)."""
VOCABULARY = range(151_936)
_rng = random.Random(18)
LOGPROBS = [struct.unpack("<f", struct.pack("<f", -_rng.expovariate(2.0)))[0] for _ in range(4096)]
"""float32 values a model server might report, drawn from."""


def token_arrays(shape: str, seed: str) -> list[tuple[list[int], list[int], list[float]]]:
    """Each turn's prompt ids, completion ids and logprobs, drawn from ``seed``."""
    if shape == "flat":
        ids, logprobs = list(range(150)), [-0.25] * 150
        return [(list(range(t * 50, t * 50 + 600)), ids, logprobs) for t in range(TURNS)]
    draw = random.Random(seed)
    turns, prompt = [], draw.choices(VOCABULARY, k=120)
    for _ in range(TURNS):
        completion = draw.choices(VOCABULARY, k=50)
        turns.append((prompt, completion, draw.choices(LOGPROBS, k=50)))
        prompt = prompt + completion + draw.choices(VOCABULARY, k=30)
    return turns


def trajectory(lease: Lease, index: int, shape: str) -> Trajectory:
    turns = [
        Turn(
            index=t,
            prompt_token_ids=prompt,
            completion_token_ids=completion,
            logprobs=logprobs,
            finish_reason="tool_calls",
            tool_results=[
                ToolResult(
                    call_id=f"c{t}",
                    name="bash",
                    arguments='{"command": "ls"}',
                    output="file.py\n" * 40,
                    exit_code=0,
                )
            ],
        )
        for t, (prompt, completion, logprobs) in enumerate(token_arrays(shape, lease.episode_id))
    ]
    return Trajectory(
        trajectory_id=f"{lease.episode_id}-a0",
        episode_id=lease.episode_id,
        job_id=lease.job_id,
        group_id=lease.group_id,
        task_id=lease.task_id,
        turns=turns,
        reward=Reward(value=float(index % 2), valid=True),
        provenance=Provenance(task_hash=lease.task_hash, envfarm_version="bench"),
    )


async def fill(url: str, groups: int, group_size: int, shape: str = "agent") -> str:
    store = await Store.open(url, finalize=finalize_group)
    try:
        tasks = [f"bench/t{i}" for i in range(groups)]
        done = await store.create_job(
            JobRequest(tasks=tasks, policy=JobPolicy(base_url="nop"), group_size=group_size),
            {task: f"hash-{task}" for task in tasks},
        )
        ready = [f"hash-{task}" for task in tasks]
        while leases := await store.lease("bench", 256, 3600, ready):
            for lease in leases:
                await store.record("bench", trajectory(lease, lease.index, shape), final=True)
        return done
    finally:
        await store.close()


async def queue(url: str, queued: int) -> str:
    """A store holding one job of ``queued`` episodes that no worker has taken."""
    store = await Store.open(url)
    try:
        waiting = [f"bench/q{i}" for i in range(max(1, queued // 100))]
        return await store.create_job(
            JobRequest(tasks=waiting, policy=JobPolicy(base_url="nop"), group_size=100),
            dict.fromkeys(waiting, "hash-queued"),
        )
    finally:
        await store.close()


async def baseline(url: str, job_id: str) -> tuple[int, float]:
    store = await Store.open(url)
    try:
        started, count, after = time.perf_counter(), 0, 0
        while True:
            page, _ = await store.delivered(
                job_id, after=after, limit=100, consumer="baseline", forms="json"
            )
            if not page:
                break
            count += sum(len(g.trajectories) for g in page if g.json())
            after = page[-1].cursor
        return count, time.perf_counter() - started
    finally:
        await store.close()


async def parse_floor(url: str, job_id: str, form: str) -> tuple[int, float]:
    """The client's lazy read of the same groups with no HTTP and no server: each group's
    bytes as an answer carries them, read from the store untimed, then parsed and read as the
    trainer reads them, timed. Delivery through a client that parses can go no faster."""
    packed = form == "packed"
    forms: Forms = "packed" if packed else "json"
    store = await Store.open(url)
    try:
        count, seconds, after = 0, 0.0, 0
        while True:
            page, _ = await store.delivered(
                job_id, after=after, limit=100, consumer="floor", forms=forms
            )
            if not page:
                break
            bodies = [b"".join(group_parts(group, packed)) for group in page]
            started = time.perf_counter()
            for body in bodies:
                count += trainer_read(json_group(body).trajectories)
            seconds += time.perf_counter() - started
            after = page[-1].cursor
        return count, seconds
    finally:
        await store.close()


def trainer_read(trajectories: list[LazyTrajectory]) -> int:
    """A trainer's read: ids, rewards and completion tokens as buffers, never messages."""
    return sum(
        1 for t in trajectories if t.reward is not None and t.token_buffers("completion_token_ids")
    )


async def sizes(url: str, job_id: str) -> tuple[float, float]:
    """The mean JSON and packed texts of a trajectory of the first page, in KB."""
    store = await Store.open(url)
    try:
        page, _ = await store.delivered(job_id, after=0, limit=25, consumer="sizes")
        texts = [len(t) for g in page for t in g.trajectories]
        packed = [len(p or "") for g in page for p in g.packed or ()]
        return statistics.mean(texts) / 1000, statistics.mean(packed) / 1000
    finally:
        await store.close()


def serve(db: str, workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    (workdir / "tasks").mkdir(exist_ok=True)
    log = (workdir / "serve.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "envfarm", "serve", "--no-worker", "--port", "0", "--db", db,
         "--tasks", str(workdir / "tasks"), "--data-dir", str(workdir)],
        stdout=log, stderr=subprocess.STDOUT, cwd=workdir, env={**os.environ, "COLUMNS": "500"},
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"serving on (http://\S+?) ", (workdir / "serve.log").read_text())
        if found:
            return proc, found.group(1)
        time.sleep(0.1)
    proc.kill()
    raise SystemExit((workdir / "serve.log").read_text())


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


MODES = (
    "long-poll models", "long-poll json", "long-poll packed", "long-poll ndjson-packed",
    "long-poll arrow", "long-poll ndjson-packed gzip", "long-poll ndjson-packed zstd",
    "stream models", "stream json", "stream packed", "stream packed gzip", "stream packed zstd",
)  # fmt: skip
"""``models``: the JSON form parsed into ``DeliveredGroup`` models (``groups()``, ``stream()``);
every other mode is read lazily (``lazy_groups()``, ``lazy_stream()``) as a trainer reads it."""
FLOORS = ("client parse alone json", "client parse alone packed")
"""Not deliveries: the client's own read of the JSON and packed forms, in this process with no
HTTP (``parse_floor``), the most a delivery in that form can reach."""
MEASURED = MODES + FLOORS


async def consume(url: str, job_id: str, mode: str, consumer: str) -> tuple[int, float]:
    kind, *form = mode.split()
    compression = form[1] if len(form) > 1 else None
    async with EnvfarmClient(url) as client:
        started, count = time.perf_counter(), 0
        last = (await client.job(job_id)).last_cursor
        if kind == "long-poll" and form == ["models"]:
            async for group in client.groups(job_id, consumer=consumer, wait_s=0.0):
                count += len(group.trajectories)
        elif kind == "long-poll":
            async for lazy in client.lazy_groups(
                job_id, consumer=consumer, wait_s=0.0, encoding=form[0], compression=compression
            ):
                count += trainer_read(lazy.trajectories)
        elif form == ["models"]:
            async for group in client.stream(job_id, consumer=consumer):
                count += len(group.trajectories)
                if group.cursor == last:
                    break
        else:
            async for lazy in client.lazy_stream(
                job_id, consumer=consumer, packed=form[0] == "packed", compression=compression
            ):
                count += trainer_read(lazy.trajectories)
                if lazy.cursor == last:
                    break
        return count, time.perf_counter() - started  # fmt: skip


async def memory(url: str, job_id: str) -> None:
    async with EnvfarmClient(url) as client:
        await client.job(job_id)
        await client.page(job_id, wait_s=0.0)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=500)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--db", default=None, help="database URL (default: a SQLite file)")
    parser.add_argument("--shape", choices=SHAPES, default="agent", help="token shape (SHAPES)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        db = args.db or f"sqlite:///{work / 'bench.db'}"
        started = time.perf_counter()
        done = await fill(db, args.groups, args.group_size, args.shape)
        fill_s = time.perf_counter() - started
        json_kb, packed_kb = await sizes(db, done)
        proc, url = serve(db, work)
        rates: dict[str, list[float]] = {"baseline": [], **{mode: [] for mode in MEASURED}}
        ratios: dict[str, list[float]] = {mode: [] for mode in MEASURED}
        try:
            for mode in MODES:
                await consume(url, done, mode, f"warm-up_{mode}".replace(" ", "_"))
            for round_ in range(args.rounds):
                order = MEASURED[round_ % len(MEASURED) :] + MEASURED[: round_ % len(MEASURED)]
                for mode in order:
                    count, base_s = await baseline(db, done)
                    rates["baseline"].append(count / base_s)
                    if mode in FLOORS:
                        count, seconds = await parse_floor(db, done, mode.split()[-1])
                    else:
                        name = f"r{round_}_{mode}".replace(" ", "_")
                        count, seconds = await consume(url, done, mode, name)
                    rates[mode].append(count / seconds)
                    ratios[mode].append(rates[mode][-1] / rates["baseline"][-1])
                base = statistics.median(rates["baseline"][-len(MEASURED) :])
                print(
                    f"round {round_ + 1}: baseline {base:.0f} traj/s (median), "
                    + ", ".join(f"{m} {ratios[m][-1]:.2f}x" for m in MEASURED),
                    flush=True,
                )
        finally:
            proc.terminate()
            proc.wait()
        rss = {}
        for name, queued in (("empty", 0), ("queued", args.queued)):
            directory = work / name
            directory.mkdir()
            url_of_store = f"sqlite:///{directory / 'store.db'}"
            job = await queue(url_of_store, queued) if queued else None
            if job is None:
                await (await Store.open(url_of_store)).close()
            proc, url = serve(url_of_store, directory)
            try:
                if job is not None:
                    await memory(url, job)
                rss[name] = rss_mb(proc.pid)
            finally:
                proc.terminate()
                proc.wait()
        empty_rss, loaded_rss = rss["empty"], rss["queued"]
        db_bytes = (work / "bench.db").stat().st_size if args.db is None else None
    rate = {mode: statistics.median(values) for mode, values in rates.items()}
    ratio = {mode: statistics.median(values) for mode, values in ratios.items()}
    spread = {mode: (min(values), max(values)) for mode, values in ratios.items()}
    trajectories = args.groups * args.group_size
    print(f"{trajectories} trajectories of the {args.shape} shape ({json_kb:.1f} KB of JSON, "
          f"{packed_kb:.1f} KB packed) a figure, {args.rounds} rounds; medians")  # fmt: skip
    print(f"{'mode':<30} {'traj/s':>9} {'vs store':>9} {'range':>13}")
    print(f"{'baseline':<30} {rate['baseline']:>9.0f} {1:>8.2f}x")
    for mode in MEASURED:
        low, high = spread[mode]
        print(f"{mode:<30} {rate[mode]:>9.0f} {ratio[mode]:>8.2f}x {low:>6.2f}-{high:.2f}x")
    per_1000 = (loaded_rss - empty_rss) / (args.queued / 1000)
    print(f"server RSS: {empty_rss:.1f} MB empty, {loaded_rss:.1f} MB with {args.queued} queued "
          f"episodes (+ {per_1000:.3f} MB per 1,000); store filled in {fill_s:.1f}s")  # fmt: skip
    figures = {
        "shape": args.shape,
        "json_kb": round(json_kb, 1),
        "packed_kb": round(packed_kb, 1),
        "groups": args.groups,
        "group_size": args.group_size,
        "rounds": args.rounds,
        "store_traj_per_s": round(rate["baseline"]),
        **{f"{mode}_traj_per_s": round(rate[mode]) for mode in MEASURED},
        **{f"{mode}_vs_store": round(ratio[mode], 3) for mode in MEASURED},
        "server_rss_empty_mb": round(empty_rss, 1),
        "server_rss_queued_mb": round(loaded_rss, 1),
        "queued_episodes": args.queued,
        "rss_mb_per_1000_queued": round(per_1000, 4),
    }
    if db_bytes is not None:
        figures["db_bytes_total"] = db_bytes
    print(json.dumps(figures))


if __name__ == "__main__":
    asyncio.run(main())
