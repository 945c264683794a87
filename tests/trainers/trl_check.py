"""TRL's own async GRPO code on envfarm's groups; run in the TRL virtualenv (scripts/trainer-venv).

``python trl_check.py GROUPS_JSON URL TOKEN`` prints one JSON report on stdout:

- ``offline``: the groups of GROUPS_JSON mapped by ``rollout_samples``, drained through TRL's
  ``RolloutQueueDataset`` and ``FixedCountBatcher`` and packed by ``DataCollatorForRollout``: the
  token each loss term predicts, its old logprob and advantage, per sample its group and version.
- ``live``: an ``EnvfarmRolloutWorker`` on job ``job-1`` of the server at URL, drained by TRL's
  ``RolloutQueueDataset`` with TRL's staleness check, then told of a new version and stopped.

tests/unit/test_trainer_trl.py runs it and asserts on the report.
"""

from __future__ import annotations

import json
import queue
import sys
import time
from collections import defaultdict
from typing import Any

from trl.experimental.async_grpo.async_grpo_trainer import (
    DataCollatorForRollout,
    FixedCountBatcher,
    RolloutQueueDataset,
    RolloutWorkerProtocol,
)

import envfarm
from envfarm.integrations.feed import FedGroup
from envfarm.integrations.trl import EnvfarmRolloutWorker, rollout_samples
from envfarm.models.jobs import DeliveredGroup

VERSION = 5


def collated(source: Any, count: int, version: int, max_staleness: int, health: Any) -> Any:
    dataset = RolloutQueueDataset(source, model_version_fn=lambda: version, check_health_fn=health,
                                  stale_after_s=120, metrics=defaultdict(list),
                                  max_staleness=max_staleness, poll_interval_s=0.5)  # fmt: skip
    (rows,) = [next(iter(FixedCountBatcher(dataset, num_processes=1, microbatch_size=count)))]
    return rows, DataCollatorForRollout(pad_token_id=0)([rows])


def loss_terms(batch: Any) -> dict[str, Any]:
    index = batch["token_index"][0]
    index = index[index >= 0]
    return {
        "labels": batch["shift_labels"][0][index].tolist(),
        "old_log_probs": batch["old_log_probs"][0][: len(index)].tolist(),
        "advantages": batch["advantages"][0][: len(index)].tolist(),
        "trained_tokens": int(batch["global_n_tokens"][0].item()),
    }


def offline(groups: list[FedGroup]) -> dict[str, Any]:
    samples = [s for group in groups for s in rollout_samples(group, current_version=VERSION)]
    buffer: queue.Queue[Any] = queue.Queue()
    for sample in samples:
        buffer.put(sample)
    rows, batch = collated(buffer, len(samples), VERSION, 4, lambda _: None)
    return {
        "samples": [
            {"group_id": s.group_id, "model_version": s.model_version, "advantage": s.advantage,
             "length": len(s.input_ids), "trained": int(s.completion_mask.sum()),
             "reward": s.metrics["reward"]}
            for s in samples
        ],
        "batch_samples": sum(len(row.samples) for row in rows),
        **loss_terms(batch),
    }  # fmt: skip


def live(url: str, token: str, expected: int) -> dict[str, Any]:
    worker = EnvfarmRolloutWorker(url, "job-1", token=token, max_staleness=2, wait_s=0.5)
    members = [n for n in vars(RolloutWorkerProtocol) if not n.startswith("_")]
    members += list(RolloutWorkerProtocol.__annotations__)
    worker.update_model_version(VERSION)
    worker.start()
    rows, batch = collated(worker.rollout_buffer, expected, VERSION, 2, worker.check_health)
    worker.check_health(60)
    worker.update_model_version(VERSION + 1)
    deadline = time.monotonic() + 60
    while worker.feed is not None and worker.feed.version != VERSION + 1:
        if time.monotonic() > deadline:
            raise TimeoutError("the new version was never published")
        time.sleep(0.05)
    feed = worker.feed
    worker.stop()
    assert feed is not None
    return {
        "protocol_members": sorted(set(members)),
        "missing_members": sorted(m for m in set(members) if not hasattr(worker, m)),
        "delivered": feed.delivered,
        "dropped_stale": feed.dropped_stale,
        "metrics": worker.metrics_queue.qsize(),
        "group_ids": sorted({sample["group_id"] for row in rows for sample in row.samples}),
        **loss_terms(batch),
    }


def main() -> None:
    path, url, token = sys.argv[1:4]
    with open(path, encoding="utf-8") as source:
        data = json.load(source)
    groups = [FedGroup.of(DeliveredGroup.model_validate(g)) for g in data["groups"]]
    report = {"envfarm": envfarm.__file__, "offline": offline(groups),
              "live": live(url, token, int(data["live_samples"]))}  # fmt: skip
    print(json.dumps(report))


if __name__ == "__main__":
    main()
