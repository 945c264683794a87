"""Wire shapes of rollout jobs: what a trainer submits, what it reads back, what it consumes.

These are the REST API's bodies (docs/design.md, "Fixed interfaces") and the rows the store keeps
as JSON. API keys are ``SecretStr``: they are kept for the workers but never serialized back
to a client (``JobView`` carries the request with keys redacted).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

JobStatus = Literal["queued", "running", "paused", "completed", "cancelled", "failed"]
TERMINAL_STATUSES: tuple[JobStatus, ...] = ("completed", "cancelled", "failed")
StalePolicy = Literal["drop", "mark"]
JobAction = Literal["pause", "resume", "cancel"]


class TaskKey(NamedTuple):
    """A task as a job holds it: its id and the content hash its episodes were queued with."""

    task_id: str
    task_hash: str


class Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EndpointRequest(Wire):
    """One endpoint of a pool: the job's, and the one the pool serves (``EndpointSpec``)."""

    url: str = Field(min_length=1)
    """Base URL of an OpenAI-compatible endpoint, e.g. http://host:8000/v1."""
    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    """Relative capacity: an endpoint's load is its requests in flight divided by its weight."""
    api_key: SecretStr | None = None
    """This endpoint's key; None uses the pool's key."""


class JobPolicy(Wire):
    base_url: str = ""
    """``oracle``, ``nop`` or the base URL of an OpenAI-compatible endpoint (empty when
    ``endpoints`` lists several)."""
    model: str | None = None
    api_key: SecretStr | None = None
    endpoints: list[EndpointRequest] = Field(default_factory=list)
    """Several inference sites with weights, served as one pool."""
    server_profile: Literal["auto", "vllm", "sglang", "llamacpp", "openai"] = "auto"
    routed_experts: bool = False
    token_mode: bool = False
    """Send prompts as token ids (docs/policies.md); refused before the job starts when an
    endpoint cannot take ids."""
    tokenizer: str | None = None
    """Token mode: a Hugging Face tokenizer that renders new messages (needed for SGLang)."""
    tool_parser: Literal["auto", "hermes", "fenced", "llama"] = "auto"
    """Token mode: how tool calls are read from the sampled text."""

    @model_validator(mode="after")
    def _one_target(self) -> JobPolicy:
        if bool(self.base_url) == bool(self.endpoints):
            raise ValueError(
                "give either `base_url` (oracle, nop or an endpoint URL) or `endpoints` "
                "(a list of {url, weight, api_key}), not both"
            )
        return self


class JudgeRequest(Wire):
    """The rubric judge of a job's rubric tasks (docs/rubrics.md); may differ from the policy."""

    base_url: str = Field(min_length=1)
    model: str = "default"
    api_key: SecretStr | None = None


class Sampling(Wire):
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = None


MAX_GROUP_SIZE = 4096
MAX_RETRIES = 20


class JobRequest(Wire):
    """A rollout job, the one model of it from the CLI to the API to the store."""

    tasks: list[str] = Field(min_length=1)
    """Task ids known to the server (``GET /v1/tasks``)."""
    policy: JobPolicy
    group_size: int = Field(default=1, ge=1, le=MAX_GROUP_SIZE)
    sampling: Sampling = Field(default_factory=Sampling)
    concurrency: int | None = Field(default=None, ge=1)
    """Episodes of this job running at once, across all workers (None: the workers' limit)."""
    priority: int = 0
    """Higher first; jobs of equal priority share the workers fairly."""
    max_staleness: int | None = Field(default=None, ge=0)
    """How many policy versions a delivered group's dispatch version may lag the trainer's."""
    stale_policy: StalePolicy = "drop"
    """A group that still arrives too stale is dropped and rerun (``drop``) or delivered with
    ``stale: true`` (``mark``)."""
    max_retries: int = Field(default=2, ge=0, le=MAX_RETRIES)
    """Extra attempts of an episode that failed for an infrastructure reason."""
    max_turns: int = Field(default=50, ge=1)
    context_budget: int | None = Field(default=None, ge=1)
    """Prompt tokens before the agent summarizes its work and restarts its context."""
    judge: JudgeRequest | None = None
    """Without one, rubric tasks are graded by their tests alone and flagged
    ``rubric:unjudged`` when the policy is built in, else their rewards are invalid."""
    allow_unjudged: bool = False
    """Grade rubric tasks by their tests alone when no judge is given (flagged
    ``rubric:unjudged``); implied by the built-in policies."""
    leave_one_out: bool = False
    name: str | None = Field(default=None, max_length=200)
    agent: str | None = Field(default=None, max_length=100)
    """An installed agent by name (docs/agents.md); None or ``builtin``: envfarm's own loop."""
    agent_spec: dict[str, Any] | None = None
    """A user's own agent spec (the TOML file's table), used instead of ``agent``."""
    verifier_network: Literal["task-default", "none"] | None = None
    """The verifier's network when a task sets none (docs/task-format.md): ``task-default``
    gives a fresh verifier container Harbor's public network, ``none`` keeps it offline; None:
    the server's default. A task's own ``network_mode`` always wins."""
    sidecar_network: Literal["public", "none"] | None = None
    """Outbound network access of compose sidecars (services other than ``main``): ``public``
    as under Harbor, ``none`` keeps them on the environment's internal network alone; None:
    the server's default (``public``). The agent's container is not changed by it."""
    request_ratio: float | None = Field(default=None, gt=0, le=1)
    """Kubernetes: what each environment pod requests of its limits (None: the server's,
    0.5 by default). Requests equal to limits leave no headroom: a pod that meets its limit
    is throttled or killed where one with headroom would have gone on."""
    realism: Literal["workstation", "off"] | None = None
    """The sandboxes' profile (docs/sandbox.md): ``workstation`` makes them look like a
    developer's machine, ``off`` leaves them as they are; None: the server's default. A task's
    own ``[environment] realism`` wins."""
    fork: Literal["auto", "off"] | None = None
    """``auto``: a group's sandboxes are copies of one warm environment where the engine can
    fork it (docs/fork.md); ``off``: each starts cold; None: the server's (``--fork``, default
    ``auto``)."""
    runtime: str | None = Field(default=None, min_length=1, max_length=100)
    """The sandboxes' container runtime (Docker) or RuntimeClass (Kubernetes); None: the
    server's. A server refuses any other than its own unless it allows it (``--allow-runtime``);
    a task that asks for gVisor gets gVisor whatever this says."""


class JobCounts(Wire):
    episodes: int = 0
    queued: int = 0
    running: int = 0
    completed: int = 0
    """Episodes that ended (with a valid reward or not)."""
    valid: int = 0
    infra_errors: int = 0
    """Episodes that ended with an infrastructure error after their retries."""
    attempts: int = 0
    groups: int = 0
    groups_completed: int = 0
    groups_dropped: int = 0
    groups_acked: int = 0
    """Groups acknowledged by the job's furthest consumer (cursors count groups from 1)."""
    mean_reward: float | None = None


class JobView(Wire):
    id: str
    status: JobStatus
    request: dict[str, Any]
    """The submitted request, API keys redacted."""
    counts: JobCounts
    created_at: datetime
    updated_at: datetime
    error: str | None = None
    last_cursor: int = 0
    """Cursor of the newest completed group."""
    consumers: dict[str, int] = Field(default_factory=dict)
    """Each consumer's last acknowledged cursor."""


class GroupMeta(Wire):
    cursor: int
    group_id: str
    task_id: str
    dispatch_version: str | None = None
    """The trainer's policy version when the group was dispatched."""
    staleness: int | None = None
    """Versions the trainer published after ``dispatch_version``, when the group completed."""
    stale: bool = False
    zero_variance: bool | None = None


class DeliveredGroup(GroupMeta):
    trajectories: list[dict[str, Any]]


class GroupPage(Wire):
    groups: list[DeliveredGroup]
    next_cursor: int | None = None
    """The cursor to pass as ``after`` for the next page (the last group's)."""


@dataclass(frozen=True)
class RawGroup:
    """A delivered group whose trajectories are the JSON text the store keeps: the server sends
    them as they are, never parsing and re-serializing megabytes of token ids."""

    meta: GroupMeta
    trajectories: list[str]
    packed: list[str | None] | None = None
    """Each trajectory's packed form when the store holds one (envfarm.models.packing)."""

    @property
    def cursor(self) -> int:
        return self.meta.cursor

    def json(self) -> str:
        """The group as a ``DeliveredGroup`` JSON object."""
        head = self.meta.model_dump_json()[:-1]
        return f'{head},"trajectories":[{",".join(self.trajectories)}]}}'

    def parsed(self) -> DeliveredGroup:
        return DeliveredGroup.model_validate_json(self.json())

    @classmethod
    def of(cls, group: DeliveredGroup) -> RawGroup:
        meta = GroupMeta.model_validate(group.model_dump(exclude={"trajectories"}))
        return cls(meta, [json.dumps(t) for t in group.trajectories])


@dataclass(frozen=True)
class RawGroupPage:
    groups: list[RawGroup]
    next_cursor: int | None = None
    ended: bool = False
    """The job had ended when this page was read and no group comes after it: a reader has
    nothing more to ask for."""

    def json(self) -> bytes:
        """The page as ``GroupPage`` JSON."""
        groups = ",".join(group.json() for group in self.groups)
        return f'{{"groups":[{groups}],"next_cursor":{json.dumps(self.next_cursor)}}}'.encode()

    def parsed(self) -> GroupPage:
        return GroupPage.model_validate_json(self.json())


class TaskInfo(Wire):
    id: str
    content_hash: str
    path: str | None = None
    services: list[str] = Field(default_factory=list)


def without_keys(request: JobRequest) -> JobRequest:
    """The request with every API key removed: what a run that holds its keys in memory stores."""
    policy = request.policy.model_copy(
        update={
            "api_key": None,
            "endpoints": [e.model_copy(update={"api_key": None}) for e in request.policy.endpoints],
        }
    )
    judge = request.judge.model_copy(update={"api_key": None}) if request.judge else None
    return request.model_copy(update={"policy": policy, "judge": judge})


def redacted(request: JobRequest) -> dict[str, Any]:
    """The request as JSON with every API key removed."""
    data = request.model_dump(mode="json", exclude_none=True)
    policy = data["policy"]
    policy.pop("api_key", None)
    for endpoint in policy.get("endpoints", []):
        endpoint.pop("api_key", None)
    if data.get("judge"):
        data["judge"].pop("api_key", None)
    return data
