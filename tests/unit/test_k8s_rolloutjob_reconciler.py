"""The RolloutJob reconciler's spec mapping and error sorting, over the in-memory Kubernetes API
and a stand-in for the controller API (the network boundary): temporary errors are retried by
the operator, permanent ones become the Ready condition."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pytest

from envfarm.client.errors import ApiConnectionError, ApiError
from envfarm.k8s.api import ROLLOUT_JOBS, SECRETS
from envfarm.models.jobs import JobCounts, JobView, TaskInfo
from envfarm.operator.rolloutjob import (
    FINALIZER,
    ApiUnavailable,
    InvalidRolloutJob,
    JobRejected,
    RolloutJobReconciler,
    SecretNotFound,
    translated,
)
from envfarm.operator.rolloutjob_spec import job_name
from envfarm.operator.workqueue import Operator, rolloutjob_controller
from envfarm.testing.k8s.memory import MemoryKubeApi
from tests.waiting import until

NS = "envfarm-sandboxes"


class Jobs:
    """The controller API as the reconciler sees it; ``down`` makes every call fail as an
    unreachable server does."""

    def __init__(self, tasks: tuple[str, ...] = ("alpha", "beta")) -> None:
        self.served = [TaskInfo(id=t, content_hash=f"hash-{t}") for t in tasks]
        self.views: dict[str, JobView] = {}
        self.requests: list[dict[str, Any]] = []
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise ApiConnectionError("GET", "http://api/v1/jobs", "cannot connect")

    async def submit(self, request: Any) -> str:
        self._check()
        self.requests.append(dict(request))
        job_id = f"job-{len(self.views)}"
        now = datetime.now(UTC)
        self.views[job_id] = JobView(
            id=job_id, status="queued", request={"name": request["name"]},
            counts=JobCounts(episodes=2, queued=2), created_at=now, updated_at=now,
        )  # fmt: skip
        return job_id

    async def job(self, job_id: str) -> JobView:
        self._check()
        return self.views[job_id]

    def status(self, job_id: str) -> str:
        """Read afresh, so that mypy does not narrow a status across awaits."""
        return self.views[job_id].status

    async def jobs(self) -> list[JobView]:
        self._check()
        return list(self.views.values())

    async def _set(self, job_id: str, status: Any) -> JobView:
        self._check()
        self.views[job_id] = self.views[job_id].model_copy(update={"status": status})
        return self.views[job_id]

    async def pause(self, job_id: str) -> JobView:
        return await self._set(job_id, "paused")

    async def resume(self, job_id: str) -> JobView:
        return await self._set(job_id, "running")

    async def cancel(self, job_id: str) -> JobView:
        return await self._set(job_id, "cancelled")

    async def tasks(self) -> list[TaskInfo]:
        self._check()
        return self.served


def body(name: str = "rj", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"tasks": {"volumeClaim": {"claimName": "tasks"}},
                 "policy": {"baseUrl": "oracle"}, **spec},
    }  # fmt: skip


async def secret(api: MemoryKubeApi, name: str, **data: str) -> None:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    await api.create(SECRETS, NS, {"metadata": {"name": name}, "data": encoded})


def test_api_errors_sort_into_temporary_and_permanent() -> None:
    unreachable = ApiConnectionError("POST", "http://api/v1/jobs", "cannot connect")
    assert translated(unreachable) is unreachable
    assert unreachable.retryable
    busy = translated(ApiError(503, {"detail": "overloaded"}, "GET", "http://api/v1/jobs/x"))
    assert isinstance(busy, ApiUnavailable)
    assert busy.retryable
    problem = {"detail": "invalid request", "errors": [{"field": "tasks", "message": "empty"}]}
    rejected = translated(ApiError(422, problem, "POST", "http://api/v1/jobs"))
    assert isinstance(rejected, JobRejected)
    assert not rejected.retryable
    assert "tasks: empty" in str(rejected)
    assert isinstance(translated(ApiError(401, {}, "GET", "http://api/v1/jobs")), JobRejected)


async def test_the_spec_becomes_the_request_with_keys_from_secrets() -> None:
    api, jobs = MemoryKubeApi(), Jobs()
    await secret(api, "keys", east="sk-east", west="sk-west\n")
    policy = {
        "endpoints": [
            {
                "url": "http://east/v1",
                "weight": 3,
                "apiKeySecretRef": {"name": "keys", "key": "east"},
            },
            {"url": "http://west/v1", "apiKeySecretRef": {"name": "keys", "key": "west"}},
        ],
        "model": "m",
        "serverProfile": "vllm",
    }
    spec = {"tasks": {"volumeClaim": {"claimName": "c"}, "ids": ["beta"]}, "policy": policy,
            "sampling": {"temperature": 0.7, "topP": 0.9, "maxTokens": 256}, "groupSize": 8,
            "concurrency": 16, "maxStaleness": 2, "priority": 5, "stalePolicy": "mark"}  # fmt: skip
    created = await api.create(ROLLOUT_JOBS, NS, {"metadata": {"name": "rj"}, "spec": spec})
    request = await RolloutJobReconciler(api, jobs, "http://api").request(created)
    assert request == {
        "name": job_name(created),
        "tasks": ["beta"],
        "policy": {
            "server_profile": "vllm", "routed_experts": False, "model": "m",
            "endpoints": [{"url": "http://east/v1", "weight": 3, "api_key": "sk-east"},
                          {"url": "http://west/v1", "weight": 1, "api_key": "sk-west"}],
        },
        "sampling": {"temperature": 0.7, "top_p": 0.9, "max_tokens": 256},
        "group_size": 8, "priority": 5, "stale_policy": "mark", "max_retries": 2,
        "max_turns": 50, "leave_one_out": False, "concurrency": 16, "max_staleness": 2,
    }  # fmt: skip
    await api.close()


async def test_the_networks_and_the_runtime_are_the_jobs_own() -> None:
    api, jobs = MemoryKubeApi(), Jobs()
    spec = {"tasks": {"ids": ["beta"]}, "policy": {"baseUrl": "oracle"},
            "verifierNetwork": "none", "sidecarNetwork": "none", "runtime": "gvisor",
            "realism": "workstation"}  # fmt: skip
    created = await api.create(ROLLOUT_JOBS, NS, {"metadata": {"name": "rj"}, "spec": spec})
    request = await RolloutJobReconciler(api, jobs, "http://api").request(created)
    assert (request["verifier_network"], request["sidecar_network"]) == ("none", "none")
    assert request["runtime"] == "gvisor"
    assert request["realism"] == "workstation"
    unset = {**spec, "verifierNetwork": None, "sidecarNetwork": None}
    created = await api.create(ROLLOUT_JOBS, NS, {"metadata": {"name": "rk"}, "spec": unset})
    request = await RolloutJobReconciler(api, jobs, "http://api").request(created)
    assert "verifier_network" not in request
    assert "sidecar_network" not in request
    await api.close()


async def test_permanent_spec_errors_name_the_field() -> None:
    api, jobs = MemoryKubeApi(), Jobs()
    reconciler = RolloutJobReconciler(api, jobs, "http://api")
    key_ref = {"baseUrl": "http://x/v1", "apiKeySecretRef": {"name": "nope", "key": "k"}}
    await api.create(ROLLOUT_JOBS, NS, body("a", policy=key_ref))
    with pytest.raises(SecretNotFound, match=r"spec.policy.apiKeySecretRef: no Secret 'nope'"):
        await reconciler.reconcile(NS, "a")
    [job] = api.objects(ROLLOUT_JOBS)
    assert job["metadata"]["finalizers"] == [FINALIZER]  # added before anything could fail
    await api.create(ROLLOUT_JOBS, NS, body("b", sampling={"temperature": -1}))
    with pytest.raises(
        InvalidRolloutJob,
        match=r"RolloutJob envfarm-sandboxes/b: sampling.temperature: Input should be",
    ):
        await reconciler.reconcile(NS, "b")
    await api.create(ROLLOUT_JOBS, NS, body("c", tasks={"image": {"reference": "x"},
                                                        "ids": ["gamma"]}))  # fmt: skip
    with pytest.raises(InvalidRolloutJob, match=r"does not serve 'gamma'"):
        await reconciler.reconcile(NS, "c")
    assert jobs.requests == []
    await api.close()


async def test_an_unreachable_api_is_retried_with_a_delay_then_the_job_is_submitted() -> None:
    api, jobs = MemoryKubeApi(), Jobs()
    jobs.down = True
    operator = Operator(api, NS, workers=2, retry_delay_s=0.01, max_delay_s=0.02, resync_s=None)
    operator.add(rolloutjob_controller(RolloutJobReconciler(api, jobs, "http://api", poll_s=0.01)))
    await operator.start()
    await api.create(ROLLOUT_JOBS, NS, body())
    await until(lambda: operator.failures)
    [job] = api.objects(ROLLOUT_JOBS)
    assert "conditions" not in (job.get("status") or {})  # temporary: no Ready=False
    jobs.down = False
    await until(lambda: (api.objects(ROLLOUT_JOBS)[0].get("status") or {}).get("counts"))
    status = api.objects(ROLLOUT_JOBS)[0]["status"]
    assert status["jobId"] == "job-0"
    assert status["apiAddress"] == "http://api/v1/jobs/job-0"
    assert status["phase"] == "Queued"
    assert status["counts"]["episodes"] == 2
    assert len(jobs.requests) == 1
    await operator.stop()
    await api.close()


async def test_a_job_submitted_before_a_crash_is_adopted_not_submitted_again() -> None:
    api, jobs = MemoryKubeApi(), Jobs()
    created = await api.create(ROLLOUT_JOBS, NS, body())
    await jobs.submit({"name": job_name(created)})
    await RolloutJobReconciler(api, jobs, "http://api").reconcile(NS, "rj")
    assert api.objects(ROLLOUT_JOBS)[0]["status"]["jobId"] == "job-0"
    assert len(jobs.requests) == 1
    await api.close()


async def test_paused_maps_to_pause_and_resume_and_delete_cancels() -> None:
    api, jobs = MemoryKubeApi(), Jobs()
    reconciler = RolloutJobReconciler(api, jobs, "http://api")
    await api.create(ROLLOUT_JOBS, NS, body(paused=True))
    await reconciler.reconcile(NS, "rj")
    assert jobs.status("job-0") == "paused"
    assert api.objects(ROLLOUT_JOBS)[0]["status"]["phase"] == "Paused"
    await api.patch(ROLLOUT_JOBS, NS, "rj", {"spec": {"paused": False}})
    await reconciler.reconcile(NS, "rj")
    assert jobs.status("job-0") == "running"
    await api.delete(ROLLOUT_JOBS, NS, "rj")
    assert await reconciler.reconcile(NS, "rj") is None
    assert jobs.status("job-0") == "cancelled"
    assert api.objects(ROLLOUT_JOBS) == []
    await api.close()
