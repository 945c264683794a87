"""Reading graded groups for a trainer: jobs, the trainer's version, and the staleness bound.

Two ways a trainer takes groups, and every adapter uses one of them:

- **A standing feed** (TRL's rollout worker, slime's rollout function): the trainer pulls groups
  as they complete. ``GroupFeed`` reads a job's groups with ``EnvfarmClient.groups`` (each
  acknowledged once the trainer has taken it, so a crash redelivers it); given a job *request*
  rather than a job id, it submits it and submits it again when it ends, until the trainer
  stops, so a training run never runs out of rollouts.
- **Groups on demand** (verl's agent loop, SkyRL's generator): the trainer hands over the
  prompts of a step and wants their rollouts back. ``run_job`` submits one job for those tasks
  and returns its groups when all have completed.

Staleness: the trainer's version (an integer step, as every supported trainer counts) goes to
``PUT /v1/policy-version`` through ``publish``, and the job is submitted with the trainer's
bound as ``max_staleness``, so the server drops and reruns a group that completes too stale.
A group can age further between completion and the trainer taking it, so the feed checks
again when it hands a group over: the lag is the trainer's version minus the group's dispatch
version, or the server's ``staleness`` when the versions are not integers; a group past the
bound is dropped (and counted in ``dropped_stale``), as each of these trainers drops stale
rollouts itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from envfarm.client import EnvfarmClient, request_body
from envfarm.integrations.episodes import EpisodeRow, episode_rows, version_number
from envfarm.models.jobs import DeliveredGroup, GroupMeta, JobRequest
from envfarm.models.trajectory import Trajectory

JobSource = str | JobRequest | Mapping[str, Any]
"""A job id to read, or a job request to submit (as a model or its JSON)."""


@dataclass(frozen=True)
class FedGroup:
    """A delivered group with its trajectories parsed."""

    meta: GroupMeta
    trajectories: list[Trajectory]

    @classmethod
    def of(cls, group: DeliveredGroup) -> FedGroup:
        meta = GroupMeta.model_validate(group.model_dump(exclude={"trajectories"}))
        return cls(meta, [Trajectory.model_validate(t) for t in group.trajectories])

    def rows(self) -> list[list[EpisodeRow]]:
        """Each trajectory's training rows, in the group's order."""
        return [episode_rows(trajectory) for trajectory in self.trajectories]


def job_body(job: JobRequest | Mapping[str, Any], max_staleness: int | None) -> dict[str, Any]:
    """The request as JSON, with the trainer's staleness bound unless the request sets one."""
    body = request_body(job) if isinstance(job, JobRequest) else dict(job)
    if max_staleness is not None and body.get("max_staleness") is None:
        body["max_staleness"] = max_staleness
    return body


class GroupFeed:
    """``async for group in feed:`` every group of the job, stale ones dropped."""

    def __init__(
        self,
        client: EnvfarmClient,
        job: JobSource,
        *,
        max_staleness: int | None,
        consumer: str = "default",
        wait_s: float = 30.0,
    ) -> None:
        self.client = client
        self.job = job
        self.max_staleness = max_staleness
        self.consumer = consumer
        self.wait_s = wait_s
        self.version: int | None = None
        self.job_id: str | None = job if isinstance(job, str) else None
        self.delivered = 0
        self.dropped_stale = 0

    async def publish(self, version: int) -> None:
        """Make ``version`` the trainer's current policy version, on the server and then here."""
        await self.client.publish_version(str(version))
        self.version = version

    def lag(self, meta: GroupMeta) -> int | None:
        dispatched = version_number(meta.dispatch_version)
        if dispatched is not None and self.version is not None:
            return self.version - dispatched
        return meta.staleness

    def too_stale(self, meta: GroupMeta) -> bool:
        lag = self.lag(meta)
        return self.max_staleness is not None and lag is not None and lag > self.max_staleness

    async def __aiter__(self) -> AsyncIterator[FedGroup]:
        while True:
            if isinstance(self.job, str):
                job_id = self.job
            else:
                job_id = await self.client.submit(job_body(self.job, self.max_staleness))
            self.job_id = job_id
            async for group in self.client.groups(
                job_id, consumer=self.consumer, wait_s=self.wait_s
            ):
                if self.too_stale(group):
                    self.dropped_stale += 1
                    continue
                self.delivered += 1
                yield FedGroup.of(group)
            if isinstance(self.job, str):
                return


async def run_job(
    client: EnvfarmClient,
    job: JobRequest | Mapping[str, Any],
    *,
    max_staleness: int | None,
    consumer: str = "default",
    wait_s: float = 30.0,
) -> list[FedGroup]:
    """Submit ``job`` and return every group it delivers, in delivery order."""
    job_id = await client.submit(job_body(job, max_staleness))
    return [
        FedGroup.of(group)
        async for group in client.groups(job_id, consumer=consumer, wait_s=wait_s)
    ]
