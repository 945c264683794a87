"""The RolloutJob reconciler: a RolloutJob is a job in the controller API, seen from the cluster.

Each pass reads the RolloutJob and drives its job through the API's client:

* **New** (no ``status.jobId``): add the finalizer first (so a delete can never orphan a job),
  resolve the spec into a job request (task ids, the policy with API keys read from the
  Secrets it names, sampling, ``groupSize``, ``concurrency``, ``maxStaleness``, ``priority``...),
  submit it and record ``jobId`` and ``apiAddress``. The job is named
  ``rolloutjob/NAMESPACE/NAME/UID``; a job of that name already in the API is adopted instead
  of submitting again, so a crash between the submission and the status write never submits
  twice.
* **Known**: mirror the job's state into ``.status`` (``phase``, ``counts``, the ``Ready``
  condition, ``observedGeneration``) and map ``spec.paused`` to pause and resume. While the
  job is not over, the pass asks to run again after ``poll_s`` (the API has no watch).
* **Deleted**: cancel the job, then remove the finalizer.

How the spec becomes a request (task sources, Secrets) is ``rolloutjob_spec.py``.

Errors: an unreachable API (``ApiConnectionError``), a 5xx answer or a Kubernetes conflict
are temporary (the operator retries with a delay); a bad spec, an unknown task, a missing
Secret or a job the API refuses are permanent (``Ready=False`` with the error's class as the
reason; the next change of the object, or the operator's resync, tries again).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from envfarm.client.errors import ApiError
from envfarm.errors import EnvfarmError, KubeNotFound
from envfarm.k8s.api import ROLLOUT_JOBS, KubeApi, KubeObject
from envfarm.k8s.objects import name_of, resource_version
from envfarm.models.jobs import TERMINAL_STATUSES, JobCounts, JobRequest, JobView, TaskInfo
from envfarm.operator.conditions import set_condition
from envfarm.operator.rolloutjob_spec import (
    ArchiveTasks,
    InvalidRolloutJob,
    JobRejected,
    JobRequestBuilder,
    SecretNotFound,
    UnknownTask,
    job_name,
)

__all__ = [
    "ApiUnavailable",
    "InvalidRolloutJob",
    "JobRejected",
    "RolloutJobReconciler",
    "SecretNotFound",
    "UnknownTask",
]

FINALIZER = "envfarm.dev/cancel-job"
PHASES = {
    "queued": "Queued",
    "running": "Running",
    "paused": "Paused",
    "completed": "Completed",
    "cancelled": "Cancelled",
    "failed": "Failed",
}


class JobApi(Protocol):
    """What the reconciler needs of the API (``envfarm.client.EnvfarmClient`` has it)."""

    async def submit(self, request: JobRequest | Mapping[str, Any]) -> str: ...

    async def job(self, job_id: str) -> JobView: ...

    async def jobs(self) -> list[JobView]: ...

    async def pause(self, job_id: str) -> JobView: ...

    async def resume(self, job_id: str) -> JobView: ...

    async def cancel(self, job_id: str) -> JobView: ...

    async def tasks(self) -> list[TaskInfo]: ...


class ApiUnavailable(EnvfarmError):
    """The API answered 5xx: retry later."""

    infrastructure = True
    retryable = True


def counts_status(counts: JobCounts) -> dict[str, int]:
    return {
        "episodes": counts.episodes,
        "queued": counts.queued,
        "running": counts.running,
        "completed": counts.completed,
        "valid": counts.valid,
        "infraErrors": counts.infra_errors,
        "groupsCompleted": counts.groups_completed,
        "groupsDelivered": counts.groups_acked,
    }


def translated(exc: ApiError) -> EnvfarmError:
    """An API error as temporary (5xx, unreachable) or permanent (the request is wrong)."""
    if exc.retryable or exc.status is None or exc.status >= 500:
        return exc if exc.retryable else ApiUnavailable(str(exc))
    details = "; ".join(f"{e.get('field')}: {e.get('message')}" for e in exc.errors)
    return JobRejected(f"{exc}{' (' + details + ')' if details else ''}")


class RolloutJobReconciler:
    def __init__(
        self,
        api: KubeApi,
        jobs: JobApi,
        api_url: str,
        *,
        archive_tasks: ArchiveTasks | None = None,
        poll_s: float = 5.0,
    ) -> None:
        self.api = api
        self.jobs = jobs
        self.api_url = api_url.rstrip("/")
        self.builder = JobRequestBuilder(api, archive_tasks)
        self.poll_s = poll_s

    async def reconcile(self, namespace: str, name: str) -> float | None:
        """One pass; the delay after which to look again, or None."""
        try:
            job = await self.api.get(ROLLOUT_JOBS, namespace, name)
        except KubeNotFound:
            return None
        try:
            if job["metadata"].get("deletionTimestamp"):
                await self._finalize(job)
                return None
            job = await self._with_finalizer(job)
            job_id = (job.get("status") or {}).get("jobId") or await self._submit(job)
            view = await self._follow(job, job_id)
        except ApiError as exc:
            raise translated(exc) from exc
        if view.status not in TERMINAL_STATUSES:
            return self.poll_s
        # Ended: follow the consumers' acknowledgements (groupsDelivered) until they catch up.
        return None if view.counts.groups_acked >= view.last_cursor else self.poll_s * 6

    async def _with_finalizer(self, job: KubeObject) -> KubeObject:
        finalizers = list(job["metadata"].get("finalizers") or [])
        if FINALIZER in finalizers:
            return job
        patch = {"metadata": {"finalizers": [*finalizers, FINALIZER],
                              "resourceVersion": resource_version(job)}}  # fmt: skip
        namespace = job["metadata"]["namespace"]
        return await self.api.patch(ROLLOUT_JOBS, namespace, name_of(job), patch)

    async def _submit(self, job: KubeObject) -> str:
        name = job_name(job)
        existing = next((v for v in await self.jobs.jobs() if v.request.get("name") == name), None)
        job_id = existing.id if existing is not None else await self.jobs.submit(
            await self.request(job)
        )  # fmt: skip
        await self.api.patch(
            ROLLOUT_JOBS,
            job["metadata"]["namespace"],
            name_of(job),
            {
                "status": {
                    "jobId": job_id,
                    "apiAddress": f"{self.api_url}/v1/jobs/{job_id}",
                    "phase": "Pending",
                }
            },
            subresource="status",
        )
        job.setdefault("status", {}).update(jobId=job_id)
        return job_id

    async def _follow(self, job: KubeObject, job_id: str) -> JobView:
        view = await self.jobs.job(job_id)
        paused = bool((job.get("spec") or {}).get("paused", False))
        if paused and view.status in ("queued", "running"):
            view = await self._transition(self.jobs.pause, job_id, view)
        elif not paused and view.status == "paused":
            view = await self._transition(self.jobs.resume, job_id, view)
        status: dict[str, Any] = {
            "jobId": job_id,
            "apiAddress": f"{self.api_url}/v1/jobs/{job_id}",
            "phase": PHASES[view.status],
            "counts": counts_status(view.counts),
            "observedGeneration": job["metadata"].get("generation", 1),
        }
        ready, reason, message = self._readiness(view)
        await set_condition(
            self.api, ROLLOUT_JOBS, job, "Ready", ready, reason, message, extra_status=status
        )
        return view

    async def _transition(self, action: Any, job_id: str, view: JobView) -> JobView:
        try:
            result: JobView = await action(job_id)
            return result
        except ApiError as exc:
            if exc.status == 409:  # the job moved on meanwhile (ended): take its state
                return await self.jobs.job(job_id)
            raise

    @staticmethod
    def _readiness(view: JobView) -> tuple[bool, str, str]:
        counts = view.counts
        progress = f"{counts.completed} of {counts.episodes} episodes ended"
        if view.status == "failed":
            return False, "JobFailed", view.error or "the job failed"
        if view.status == "cancelled":
            return False, "JobCancelled", f"the job was cancelled; {progress}"
        if view.status == "completed":
            return True, "JobCompleted", f"{progress}, {counts.valid} with a valid reward"
        if view.status == "paused":
            return True, "JobPaused", f"paused: no new episode starts; {progress}"
        return True, "JobSubmitted", f"{view.status}: {progress}"

    async def _finalize(self, job: KubeObject) -> None:
        finalizers = list(job["metadata"].get("finalizers") or [])
        if FINALIZER not in finalizers:
            return
        job_id = (job.get("status") or {}).get("jobId")
        if not job_id:
            found = [v for v in await self.jobs.jobs() if v.request.get("name") == job_name(job)]
            job_id = found[0].id if found else None
        if job_id:
            view = await self.jobs.job(job_id)
            if view.status not in TERMINAL_STATUSES:
                await self._transition(self.jobs.cancel, job_id, view)
        patch = {"metadata": {"finalizers": [f for f in finalizers if f != FINALIZER],
                              "resourceVersion": resource_version(job)}}  # fmt: skip
        await self.api.patch(ROLLOUT_JOBS, job["metadata"]["namespace"], name_of(job), patch)

    async def request(self, job: KubeObject) -> dict[str, Any]:
        """The job request a RolloutJob's spec stands for (API keys included)."""
        served = {task.id: task.content_hash for task in await self.jobs.tasks()}
        return await self.builder.request(job, served)
