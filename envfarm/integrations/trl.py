"""TRL's asynchronous GRPO: a rollout worker that feeds envfarm's groups to ``AsyncGRPOTrainer``.

``AsyncGRPOTrainer(..., rollout_worker=EnvfarmRolloutWorker(url, job))`` (TRL's experimental
``trl.experimental.async_grpo``) drains ``rollout_buffer``, a queue of TRL's own
``RolloutSample``; this worker fills it from a ``GroupFeed`` on a thread of its own, and
satisfies TRL's ``RolloutWorkerProtocol`` (``rollout_buffer``, ``metrics_queue``, ``start``,
``stop``, ``update_model_version``, ``check_health``).

The mapping, without re-tokenizing (``envfarm.integrations.episodes``): one ``RolloutSample`` per
training row, ``input_ids`` the row's whole sequence, ``completion_mask`` 1 on sampled tokens
(0 on the prompt, tool output and template glue), ``old_log_probs`` the sampling logprobs (0 on
context), ``advantage`` envfarm's group advantage stamped on every row of a trajectory (as TRL
stamps one advantage on every row a conversation forked into), ``group_id`` a number the worker
gives each group it queues (TRL wants an int; cursors restart with each job), ``model_version``
the oldest policy version behind the trajectory (else the group's dispatch version, else the
trainer's current one). A summarized session's segments are separate rows with the
trajectory's advantage.

Versions: ``update_model_version(n)`` (which TRL calls after each weight sync) publishes ``n``
to envfarm. Staleness: TRL's own bound is ``AsyncGRPOConfig.max_staleness`` (default 4, and TRL
drops older samples as it dequeues them); give the worker the same number: the job is submitted
with it and groups past it are dropped before they are queued.

An invalid episode (``reward.valid`` false) is handled as TRL's own ``_score_group`` handles a
rollout no reward function could score: its rows stay in the group with advantage 0 (nothing
to learn from, and the valid rewards' advantage is computed without it, as envfarm's is) and
reward NaN in the metrics. A trajectory with no usable token data gives no row, and a row
without a sampled token is left out, as TRL leaves out a row with nothing to train.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import queue
import threading
import time
from typing import Any

from envfarm.client import EnvfarmClient
from envfarm.integrations.episodes import IntegrationError, version_number
from envfarm.integrations.feed import FedGroup, GroupFeed, JobSource

DEFAULT_MAX_STALENESS = 4
"""``AsyncGRPOConfig.max_staleness``'s default in TRL."""
PING_S = 5.0


def _trl() -> Any:
    try:
        from trl.experimental.async_grpo import async_rollout_worker
    except ImportError as exc:
        raise IntegrationError("the TRL adapter needs TRL: pip install 'envfarm[trl]'") from exc
    return async_rollout_worker


def rollout_samples(
    group: FedGroup, *, current_version: int = 0, group_id: int | None = None
) -> list[Any]:
    """The group as TRL ``RolloutSample``s (one per training row), in order; ``group_id``
    defaults to the group's cursor."""
    import numpy as np

    rollout_sample = _trl().RolloutSample
    samples = []
    now = time.time()
    for trajectory, rows in zip(group.trajectories, group.rows(), strict=True):
        valid = trajectory.reward.valid and trajectory.reward.value is not None
        reward = (
            float(trajectory.reward.value)
            if valid and trajectory.reward.value is not None
            else math.nan
        )
        advantage = trajectory.advantage if valid and trajectory.advantage is not None else 0.0
        version = version_number(trajectory.policy_versions.min)
        if version is None:
            version = version_number(group.meta.dispatch_version)
        opening = _opening(trajectory.messages)
        for row in rows:
            if not any(row.response_mask):
                continue
            samples.append(
                rollout_sample(
                    prompt=opening,
                    completion=trajectory.messages[len(opening) :],
                    input_ids=np.asarray(row.tokens, dtype=np.int64),
                    completion_mask=np.asarray(
                        [0] * len(row.prompt_ids) + row.response_mask, dtype=np.int64
                    ),
                    old_log_probs=np.asarray(
                        [0.0] * len(row.prompt_ids) + row.response_logprobs, dtype=np.float32
                    ),
                    advantage=float(advantage),
                    model_version=current_version if version is None else version,
                    group_id=group.meta.cursor if group_id is None else group_id,
                    metrics={"reward": reward, "envfarm_valid": float(valid)},
                    enqueued_at=now,
                )
            )
    return samples


def _opening(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages before the first assistant message: the prompt."""
    for index, message in enumerate(messages):
        if message.get("role") == "assistant":
            return messages[:index]
    return list(messages)


class EnvfarmRolloutWorker:
    """TRL's ``RolloutWorkerProtocol`` over an envfarm job (a job id, or a request it submits and
    submits again whenever it ends)."""

    def __init__(
        self,
        base_url: str,
        job: JobSource,
        *,
        token: str | None = None,
        max_staleness: int | None = DEFAULT_MAX_STALENESS,
        consumer: str = "trl",
        queue_maxsize: int = 0,
        wait_s: float = 5.0,
    ) -> None:
        self.base_url, self.token, self.job = base_url, token, job
        self.max_staleness, self.consumer, self.wait_s = max_staleness, consumer, wait_s
        self.rollout_buffer: queue.Queue[Any] = queue.Queue(maxsize=queue_maxsize)
        self.metrics_queue: queue.Queue[dict[str, float]] = queue.Queue(maxsize=4096)
        self.model_version = 0
        self.feed: GroupFeed | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._heartbeat = time.time()
        self._client: EnvfarmClient | None = None
        self._groups = 0
        """Groups queued so far: each one's ``group_id`` (cursors restart with each job)."""
        self._queued: tuple[str | None, int] | None = None
        """The job and cursor of the last group whose samples are all in the buffer."""

    def start(self) -> None:
        if self._thread is not None:
            return
        self._heartbeat = time.time()
        self._thread = threading.Thread(
            target=self._run, name="envfarm-rollout-worker", daemon=True
        )
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except asyncio.CancelledError:
            pass
        except BaseException as exc:  # kept for check_health, which TRL polls
            self._error = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._main = asyncio.current_task()
        async with EnvfarmClient(self.base_url, self.token) as client:
            self._client = client
            self.feed = GroupFeed(client, self.job, max_staleness=self.max_staleness,
                                  consumer=self.consumer, wait_s=self.wait_s)  # fmt: skip
            self._ready.set()
            await self.feed.publish(self.model_version)
            pinger = asyncio.create_task(self._ping(client))
            try:
                async for group in self.feed:
                    self._heartbeat = time.time()
                    self._groups += 1
                    samples = rollout_samples(
                        group, current_version=self.model_version, group_id=self._groups
                    )
                    for sample in samples:
                        await asyncio.to_thread(self.rollout_buffer.put, sample)
                    self._queued = (self.feed.job_id, group.meta.cursor)
                    self._report(group)
            finally:
                pinger.cancel()

    async def _ping(self, client: EnvfarmClient) -> None:
        while True:
            if await client.healthy():
                self._heartbeat = time.time()
            await asyncio.sleep(PING_S)

    def _report(self, group: FedGroup) -> None:
        feed = self.feed
        if feed is None:
            return
        with contextlib.suppress(queue.Full):
            self.metrics_queue.put_nowait(
                {"envfarm_groups_delivered": float(feed.delivered),
                 "envfarm_groups_dropped_stale": float(feed.dropped_stale),
                 "envfarm_group_lag": float(feed.lag(group.meta) or 0)}
            )  # fmt: skip

    def update_model_version(self, model_version: int) -> None:
        """Record TRL's new policy version and publish it to envfarm."""
        self.model_version = model_version
        loop, feed = self._loop, self.feed
        if loop is not None and feed is not None and not loop.is_closed():
            done = asyncio.run_coroutine_threadsafe(feed.publish(model_version), loop)
            done.add_done_callback(self._publish_done)

    def _publish_done(self, done: Any) -> None:
        if not done.cancelled() and done.exception() is not None:
            self._error = done.exception()

    def check_health(self, stale_after_s: float) -> None:
        """Raise when the worker failed or envfarm has not answered for ``stale_after_s``."""
        if self._error is not None:
            raise IntegrationError(
                f"the envfarm rollout worker failed: {self._error}"
            ) from self._error
        if self._thread is not None and not self._thread.is_alive():
            raise IntegrationError("the envfarm rollout worker stopped: its job ended")
        age = time.time() - self._heartbeat
        if age > stale_after_s:
            raise IntegrationError(
                f"envfarm has not answered for {age:.0f}s (> {stale_after_s:.0f}s)"
            )

    def stop(self) -> None:
        """Acknowledge the groups whose samples are queued (TRL has them), then stop."""
        loop, main, thread = self._loop, self._main, self._thread
        client, queued = self._client, self._queued
        job_id, cursor = queued or (None, 0)
        if loop is not None and not loop.is_closed() and client is not None and job_id:
            ack = client.ack(job_id, cursor, self.consumer)
            acked = asyncio.run_coroutine_threadsafe(ack, loop)
            with contextlib.suppress(Exception):
                acked.result(timeout=30)
        if loop is not None and main is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(main.cancel)
        if thread is not None:
            thread.join(timeout=30)
        self._thread = None
