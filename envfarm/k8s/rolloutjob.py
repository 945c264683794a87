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

Tasks: the API runs tasks from its own library (``GET /v1/tasks``), so the spec's task source
says which tasks, and the API must already hold them. A ConfigMap's archive is read and each
task in it must be served with the same content hash (``archive_tasks`` turns the archive
into ``{id: content_hash}``); a volume or image source cannot be read here and names the
tasks through ``spec.tasks.ids`` (default: every task the API serves).

Errors: an unreachable API (``ApiConnectionError``), a 5xx answer or a Kubernetes conflict
are temporary (the operator retries with a delay); a bad spec, an unknown task, a missing
Secret or a job the API refuses are permanent (``Ready=False`` with the error's class as the
reason; the next change of the object, or the operator's resync, tries again).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from envfarm.client.errors import ApiError
from envfarm.errors import EnvfarmError, KubeNotFound
from envfarm.k8s.api import CONFIG_MAPS, ROLLOUT_JOBS, SECRETS, KubeApi, KubeObject
from envfarm.k8s.conditions import set_condition
from envfarm.k8s.objects import name_of, resource_version, uid_of
from envfarm.models.jobs import TERMINAL_STATUSES, JobCounts, JobRequest, JobView, TaskInfo

FINALIZER = "envfarm.dev/cancel-job"
DEFAULT_ARCHIVE_KEY = "tasks.tar.gz"
PHASES = {
    "queued": "Queued",
    "running": "Running",
    "paused": "Paused",
    "completed": "Completed",
    "cancelled": "Cancelled",
    "failed": "Failed",
}
ArchiveTasks = Callable[[bytes], Mapping[str, str]]
"""A task archive's bytes -> ``{task id: content hash}``; raises ``InvalidRolloutJob``."""


class JobApi(Protocol):
    """What the reconciler needs of the API (``envfarm.client.EnvfarmClient`` has it)."""

    async def submit(self, request: JobRequest | Mapping[str, Any]) -> str: ...

    async def job(self, job_id: str) -> JobView: ...

    async def jobs(self) -> list[JobView]: ...

    async def pause(self, job_id: str) -> JobView: ...

    async def resume(self, job_id: str) -> JobView: ...

    async def cancel(self, job_id: str) -> JobView: ...

    async def tasks(self) -> list[TaskInfo]: ...


class InvalidRolloutJob(EnvfarmError):
    """The spec cannot become a job (a bad field, an unreadable task archive)."""


class UnknownTask(InvalidRolloutJob):
    """A task the spec names is not served by the API, or is served in another version."""


class SecretNotFound(InvalidRolloutJob):
    """A Secret (or its key) that the policy names does not exist."""


class JobRejected(InvalidRolloutJob):
    """The API refused the job (4xx): the request is wrong, retrying cannot help."""


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
    }


def job_name(job: KubeObject) -> str:
    metadata = job["metadata"]
    return f"rolloutjob/{metadata['namespace']}/{metadata['name'][:80]}/{uid_of(job)}"


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
        self.archive_tasks = archive_tasks
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
        return None if view.status in TERMINAL_STATUSES else self.poll_s

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
        spec = job.get("spec") or {}
        namespace = job["metadata"]["namespace"]
        body: dict[str, Any] = {
            "name": job_name(job),
            "tasks": await self._task_ids(namespace, spec.get("tasks") or {}),
            "policy": await self._policy(namespace, spec.get("policy") or {}),
            "sampling": _sampling(spec.get("sampling") or {}),
            "group_size": spec.get("groupSize", 1),
            "priority": spec.get("priority", 0),
            "stale_policy": spec.get("stalePolicy", "drop"),
            "max_retries": spec.get("maxRetries", 2),
            "max_turns": spec.get("maxTurns", 50),
            "leave_one_out": spec.get("leaveOneOut", False),
        }
        for field, key in (("concurrency", "concurrency"), ("maxStaleness", "max_staleness")):
            if spec.get(field) is not None:
                body[key] = spec[field]
        try:
            JobRequest.model_validate(body)
        except ValueError as exc:
            raise InvalidRolloutJob(
                f"spec of RolloutJob {namespace}/{name_of(job)}: {exc}"
            ) from exc
        return body

    async def _task_ids(self, namespace: str, source: dict[str, Any]) -> list[str]:
        served = {t.id: t.content_hash for t in await self.jobs.tasks()}
        wanted: list[str] | None = source.get("ids")
        if "configMap" in source:
            archived = await self._archived(namespace, source["configMap"])
            for task_id in wanted or []:
                if task_id not in archived:
                    raise UnknownTask(f"spec.tasks.ids: task {task_id!r} is not in the archive")
            for task_id, digest in archived.items():
                if served.get(task_id) not in (None, digest):
                    raise UnknownTask(
                        f"task {task_id!r}: the API serves a different version of it "
                        f"(content hash {served[task_id][:12]}, the archive's {digest[:12]})"
                    )
            wanted = wanted or sorted(archived)
        wanted = wanted or sorted(served)
        missing = [task_id for task_id in wanted if task_id not in served]
        if missing:
            raise UnknownTask(
                f"spec.tasks: the API does not serve {', '.join(map(repr, missing[:5]))}"
                f"{' and more' if len(missing) > 5 else ''} (it serves {len(served)} tasks; "
                "tasks must be in the controllers' task library)"
            )
        if not wanted:
            raise InvalidRolloutJob("spec.tasks: no task to run (the API serves none)")
        return wanted

    async def _archived(self, namespace: str, ref: dict[str, Any]) -> Mapping[str, str]:
        name, key = ref.get("name", ""), ref.get("key", DEFAULT_ARCHIVE_KEY)
        try:
            config_map = await self.api.get(CONFIG_MAPS, namespace, name)
        except KubeNotFound as exc:
            raise InvalidRolloutJob(f"spec.tasks.configMap: no ConfigMap {name!r}") from exc
        encoded = (config_map.get("binaryData") or {}).get(key)
        if encoded is None:
            raise InvalidRolloutJob(f"ConfigMap {name!r} has no binaryData key {key!r}")
        if self.archive_tasks is None:
            raise InvalidRolloutJob("this operator cannot read task archives")
        try:
            return self.archive_tasks(base64.b64decode(encoded, validate=True))
        except binascii.Error as exc:
            raise InvalidRolloutJob(f"ConfigMap {name!r} key {key!r}: not base64") from exc

    async def _policy(self, namespace: str, policy: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "server_profile": policy.get("serverProfile", "auto"),
            "routed_experts": policy.get("routedExperts", False),
        }
        if policy.get("baseUrl"):
            body["base_url"] = policy["baseUrl"]
        if policy.get("model"):
            body["model"] = policy["model"]
        if ref := policy.get("apiKeySecretRef"):
            body["api_key"] = await self._secret(namespace, ref, "spec.policy.apiKeySecretRef")
        endpoints = []
        for index, endpoint in enumerate(policy.get("endpoints") or []):
            entry = {"url": endpoint.get("url", ""), "weight": endpoint.get("weight", 1)}
            if ref := endpoint.get("apiKeySecretRef"):
                where = f"spec.policy.endpoints[{index}].apiKeySecretRef"
                entry["api_key"] = await self._secret(namespace, ref, where)
            endpoints.append(entry)
        if endpoints:
            body["endpoints"] = endpoints
        return body

    async def _secret(self, namespace: str, ref: dict[str, Any], where: str) -> str:
        name, key = ref.get("name", ""), ref.get("key", "")
        try:
            secret = await self.api.get(SECRETS, namespace, name)
        except KubeNotFound as exc:
            raise SecretNotFound(f"{where}: no Secret {name!r} in {namespace}") from exc
        value = (secret.get("data") or {}).get(key)
        if value is None:
            raise SecretNotFound(f"{where}: Secret {name!r} has no key {key!r}")
        try:
            return base64.b64decode(value, validate=True).decode().strip()
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise SecretNotFound(f"{where}: Secret {name!r} key {key!r} is not text") from exc


def _sampling(sampling: dict[str, Any]) -> dict[str, Any]:
    names = {"temperature": "temperature", "topP": "top_p", "maxTokens": "max_tokens",
             "seed": "seed"}  # fmt: skip
    return {names[k]: v for k, v in sampling.items() if k in names and v is not None}
