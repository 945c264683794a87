"""The trajectory contract: ``envfarm.trajectory/1``.

Trainers and external checks read these names; fields may be added, never renamed. Every field
is always present in the JSON (``null`` where not filled), so consumers can rely on the keys.
``envfarm/schemas/trajectory.schema.json`` is generated from these models (``envfarm schema``)
and a test keeps the two in sync.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = "envfarm.trajectory/1"


class WireModel(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class ToolResult(WireModel):
    call_id: str
    """The id of the tool call this result answers."""
    name: str
    """Tool name as the model wrote it (may be unknown to envfarm)."""
    arguments: str
    """The raw JSON arguments string exactly as the model produced it."""
    output: str
    """What the model was shown (after truncation)."""
    truncated: bool = False
    """True when the output was cut to the tool-output limit."""
    exit_code: int | None = None
    """Exit code of the command, null for tools that run none or a command that timed out."""
    duration_s: float = 0.0
    error: str | None = None
    """Why the call was rejected (bad JSON, unknown tool, missing argument), else null."""


class RoutedExperts(WireModel):
    shape: list[int]
    dtype: Literal["int32"] = "int32"
    data: str
    """Base64 of the raw little-endian array as returned by the server."""


class Usage(WireModel):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None


class Turn(WireModel):
    index: int
    segment: int = 0
    """Index of the context segment (0 until the first summarization)."""
    policy_version: str | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    routed_experts: RoutedExperts | None = None
    finish_reason: str | None = None
    sampling: dict[str, Any] = Field(default_factory=dict)
    """Sampling parameters actually sent to the endpoint."""
    latency_s: float = 0.0
    usage: Usage | None = None
    endpoint: str | None = None
    """Base URL of the endpoint that served this turn (built-in policies: their loopback URL)."""
    tool_results: list[ToolResult] = Field(default_factory=list)


class Segment(WireModel):
    index: int
    summary: str
    """The summary that restarted the context."""
    first_turn: int


class Reward(WireModel):
    value: float | None = None
    """The reward; null when no valid reward could be computed."""
    valid: bool = False
    """False for infrastructure faults: a trainer must not learn from this episode."""
    components: dict[str, float] = Field(default_factory=dict)
    flags: list[str] = Field(default_factory=list)
    reason: str | None = None
    """Why the reward is what it is (or why it is invalid)."""


class Timings(WireModel):
    build_s: float | None = None
    provision_s: float | None = None
    agent_s: float | None = None
    grading_s: float | None = None
    teardown_s: float | None = None
    total_s: float | None = None


class PolicyVersions(WireModel):
    min: str | None = None
    max: str | None = None


class Provenance(WireModel):
    task_hash: str
    """Content hash of the task directory."""
    image_id: str | None = None
    envfarm_version: str
    seed: int | None = None


StopReason = Literal["submitted", "no_tool_call", "max_turns", "timeout", "context_length", "error"]


class AgentOutcome(WireModel):
    stop_reason: StopReason
    """Why the agent loop ended. Model-side limits are real outcomes and still get graded."""
    turns: int = 0
    malformed_tool_calls: int = 0


class ErrorInfo(WireModel):
    type: str
    message: str
    phase: Literal["build", "provision", "agent", "grading", "teardown"]
    infrastructure: bool = True
    """True when the fault is envfarm's or the endpoint's, not the model's."""
    retryable: bool = False
    """True when another attempt may succeed (a sandbox died, the endpoint was unreachable)."""


class Trajectory(WireModel):
    schema_: Literal["envfarm.trajectory/1"] = Field("envfarm.trajectory/1", alias="schema")
    trajectory_id: str
    episode_id: str
    job_id: str
    group_id: str
    task_id: str
    attempt: int = 0
    """0 for the first attempt; retries after infrastructure faults count up."""
    messages: list[dict[str, Any]] = Field(default_factory=list)
    """OpenAI chat messages of the final context, tool calls and results included."""
    turns: list[Turn] = Field(default_factory=list)
    segments: list[Segment] = Field(default_factory=list)
    reward: Reward = Field(default_factory=Reward)
    timings: Timings = Field(default_factory=Timings)
    policy_versions: PolicyVersions = Field(default_factory=PolicyVersions)
    advantage: float | None = None
    """Group-relative advantage, set when the group completes."""
    group_zero_variance: bool | None = None
    """True when the group's valid rewards do not vary (advantage 0, nothing to learn)."""
    model: str | None = None
    outcome: AgentOutcome | None = None
    error: ErrorInfo | None = None
    provenance: Provenance

    model_config = ConfigDict(extra="forbid", populate_by_name=True, use_attribute_docstrings=True)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True)


def trajectory_json_schema() -> dict[str, Any]:
    return Trajectory.model_json_schema(by_alias=True, mode="serialization")
