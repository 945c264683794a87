"""A RolloutJob's spec as the job request the controller API takes.

The API runs tasks from its own library (``GET /v1/tasks``), so the spec's task source says
which tasks, and the API must already hold them. A ConfigMap's archive is read and each task in
it must be served with the same content hash (``archive_tasks`` turns the archive into
``{id: content_hash}``; it is given by the shell, which can load task directories); a volume or
image source cannot be read by the operator and names the tasks through ``spec.tasks.ids``
(default: every task the API serves). API keys come from the Secrets the policy names.
Everything wrong here is permanent: retrying the same spec cannot help.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from envfarm.errors import EnvfarmError, KubeNotFound
from envfarm.k8s.api import CONFIG_MAPS, SECRETS, KubeApi, KubeObject
from envfarm.k8s.objects import name_of, uid_of
from envfarm.models.jobs import JobRequest

DEFAULT_ARCHIVE_KEY = "tasks.tar.gz"
OPTIONAL_FIELDS = (
    ("concurrency", "concurrency"),
    ("maxStaleness", "max_staleness"),
    ("verifierNetwork", "verifier_network"),
    ("sidecarNetwork", "sidecar_network"),
    ("runtime", "runtime"),
    ("requestRatio", "request_ratio"),
    ("realism", "realism"),
    ("fork", "fork"),
)
"""The spec's fields that map one to one onto a job request's, when set (unset: the server's)."""
ArchiveTasks = Callable[[bytes], Mapping[str, str]]
"""A task archive's bytes -> ``{task id: content hash}``; raises ``InvalidRolloutJob``."""


class InvalidRolloutJob(EnvfarmError):
    """The spec cannot become a job (a bad field, an unreadable task archive)."""


class UnknownTask(InvalidRolloutJob):
    """A task the spec names is not served by the API, or is served in another version."""


class SecretNotFound(InvalidRolloutJob):
    """A Secret (or its key) that the policy names does not exist."""


class JobRejected(InvalidRolloutJob):
    """The API refused the job (4xx): the request is wrong, retrying cannot help."""


def job_name(job: KubeObject) -> str:
    metadata = job["metadata"]
    return f"rolloutjob/{metadata['namespace']}/{metadata['name'][:80]}/{uid_of(job)}"


class JobRequestBuilder:
    def __init__(self, api: KubeApi, archive_tasks: ArchiveTasks | None = None) -> None:
        self.api = api
        self.archive_tasks = archive_tasks

    async def request(self, job: KubeObject, served: Mapping[str, str]) -> dict[str, Any]:
        """The job request a RolloutJob's spec stands for (API keys included)."""
        spec = job.get("spec") or {}
        namespace = job["metadata"]["namespace"]
        body: dict[str, Any] = {
            "name": job_name(job),
            "tasks": await self._task_ids(namespace, spec.get("tasks") or {}, served),
            "policy": await self._policy(namespace, spec.get("policy") or {}),
            "sampling": _sampling(spec.get("sampling") or {}),
            "group_size": spec.get("groupSize", 1),
            "priority": spec.get("priority", 0),
            "stale_policy": spec.get("stalePolicy", "drop"),
            "max_retries": spec.get("maxRetries", 2),
            "max_turns": spec.get("maxTurns", 50),
            "leave_one_out": spec.get("leaveOneOut", False),
        }
        agent = spec.get("agent")
        if agent is not None:  # a name, or {name} / {spec: {...}} (docs/agents.md)
            body["agent"] = agent if isinstance(agent, str) else agent.get("name")
            if isinstance(agent, dict) and agent.get("spec") is not None:
                body["agent_spec"] = agent["spec"]
        for field, key in OPTIONAL_FIELDS:
            if spec.get(field) is not None:
                body[key] = spec[field]
        try:
            JobRequest.model_validate(body)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()
            )
            raise InvalidRolloutJob(
                f"spec of RolloutJob {namespace}/{name_of(job)}: {problems}"
            ) from exc
        return body

    async def _task_ids(
        self, namespace: str, source: dict[str, Any], served: Mapping[str, str]
    ) -> list[str]:
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
