"""A trainer's rollout loop against ``envfarm serve``, exactly once across crashes of either side.

    .venv/bin/envfarm serve --tasks tasks --token secret &
    .venv/bin/python examples/trainer_loop.py --api http://127.0.0.1:8000 --token secret \\
        --task envfarm/word-count-cli --task envfarm/jq-log-summary --group-size 2

(from the checkout, after ``scripts/setup``: the virtualenv's Python has envfarm installed).

It submits a job (the built-in ``oracle`` policy unless ``--policy URL`` names an
OpenAI-compatible endpoint), then consumes its groups in batches. After each batch it "trains"
(here: prints the batch's rewards and advantages), writes a checkpoint holding the last cursor
it trained on, acknowledges that cursor, and publishes its new policy version. Kill it at any
moment and start it again with the same ``--checkpoint`` (default: ``trainer-checkpoint.json``
in envfarm's data directory, ``$XDG_DATA_HOME/envfarm`` or ``~/.local/share/envfarm``, or
``ENVFARM_DATA_DIR``, where ``envfarm serve`` keeps its store): it continues the same job after the
last checkpointed cursor, so no group is trained on twice or skipped (docs/api.md, "Exactly
once, for trainers"). The server may restart too: the client retries through the outage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from statistics import fmean
from typing import Any

from envfarm.client import EnvfarmClient
from envfarm.client.errors import ApiError
from envfarm.models.jobs import DeliveredGroup
from envfarm.paths import user_data_dir


def load_checkpoint(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(state))
    os.replace(partial, path)  # atomic: the checkpoint is the old one or the new one


def train_step(step: int, batch: list[DeliveredGroup]) -> None:
    trajectories = [t for group in batch for t in group.trajectories]
    valid = [t for t in trajectories if t["reward"]["valid"]]
    rewards = [t["reward"]["value"] for t in valid]
    advantages = [t["advantage"] for t in valid if t["advantage"] is not None]
    print(
        f"step {step}: {len(batch)} groups, {len(trajectories)} trajectories "
        f"({len(trajectories) - len(valid)} invalid), "
        f"mean reward {fmean(rewards) if rewards else float('nan'):.3f}, "
        f"mean |advantage| {fmean(abs(a) for a in advantages) if advantages else 0:.3f}, "
        f"cursors {batch[0].cursor}..{batch[-1].cursor}"
    )


async def main(args: argparse.Namespace) -> None:
    checkpoint = Path(args.checkpoint)
    state = load_checkpoint(checkpoint)
    async with EnvfarmClient(args.api, args.token) as client:
        if "job_id" not in state:
            state = {"job_id": await client.submit({
                "tasks": args.task,
                "policy": {"base_url": args.policy, "model": args.model},
                "group_size": args.group_size,
                "max_staleness": args.max_staleness,
            }), "cursor": 0, "step": 0}  # fmt: skip
            save_checkpoint(checkpoint, state)
            print(f"submitted job {state['job_id']}")
        else:
            print(f"resuming job {state['job_id']} after cursor {state['cursor']}")
        job_id = state["job_id"]
        try:
            await client.job(job_id)
        except ApiError as exc:
            if exc.status != 404:
                raise
            raise SystemExit(
                f"{checkpoint}: job {job_id} is not on {args.api} (another server's store?); "
                "remove the checkpoint or pass another --checkpoint to start a new job"
            ) from None
        await client.publish_version(f"step-{state['step']}")
        batch: list[DeliveredGroup] = []
        groups = client.groups(job_id, consumer=args.consumer, after=state["cursor"], ack=False)
        while True:
            group = await anext(groups, None)
            if group is not None and group.cursor <= state["cursor"]:
                continue  # already trained on (a page repeated after a retry)
            if group is not None:
                batch.append(group)
            if batch and (group is None or len(batch) >= args.batch_groups):
                state["step"] += 1
                train_step(state["step"], batch)
                state["cursor"] = batch[-1].cursor
                save_checkpoint(checkpoint, state)
                await client.ack(job_id, state["cursor"], args.consumer)
                await client.publish_version(f"step-{state['step']}")
                batch = []
            if group is None:
                break
        view = await client.job(job_id)
        print(f"job {job_id} {view.status}: {view.counts.model_dump()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--api", default="http://127.0.0.1:8000")
    parser.add_argument("--token", default=os.environ.get("ENVFARM_TOKEN"))
    parser.add_argument("--task", action="append", required=True, help="task id (repeat)")
    parser.add_argument("--policy", default="oracle", help="oracle, nop or an endpoint URL")
    parser.add_argument("--model", default=None)
    parser.add_argument("--group-size", type=int, default=2)
    parser.add_argument("--max-staleness", type=int, default=None)
    parser.add_argument("--batch-groups", type=int, default=2, help="groups per training step")
    parser.add_argument("--consumer", default="trainer")
    parser.add_argument(
        "--checkpoint",
        default=str(user_data_dir() / "trainer-checkpoint.json"),
        help="state kept across restarts (default: in envfarm's data directory)",
    )
    asyncio.run(main(parser.parse_args()))
