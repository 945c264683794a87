"""The trajectory contract: ``envfarm.trajectory/1``.

Trainers and external checks read these names; fields may be added, never renamed. Every field
is always present in the JSON (``null`` where not filled), so consumers can rely on the keys.
``envfarm/schemas/trajectory.schema.json`` is generated from these models (``envfarm schema``)
and a test keeps the two in sync.

The models of a turn live in ``envfarm.models.turn``, and the training samples with the layouts
of the turns' tokens in ``envfarm.models.token_layout``, which works on turns alone so that
``to_json`` can lay them out; this module imports them because it is where the contract's names
are read from (docs/trajectory.md).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from envfarm.models.token_layout import (
    TrainingSample,
    compacted_turns,
    expanded_turns,
    training_samples,
)
from envfarm.models.turn import (
    IntDType,
    RequestMode,
    RoutedExperts,
    TokenSource,
    ToolResult,
    Turn,
    TurnKind,
    Usage,
    VersionSource,
    VersionSpan,
)
from envfarm.models.wire import WireModel

__all__ = [
    "SCHEMA_VERSION",
    "AgentInfo",
    "AgentOutcome",
    "ErrorInfo",
    "IntDType",
    "JudgeAttempt",
    "JudgeCall",
    "PolicyVersions",
    "Provenance",
    "ReportedTest",
    "RequestMode",
    "Reward",
    "RoutedExperts",
    "Segment",
    "StepResult",
    "StopReason",
    "TestStatus",
    "Timings",
    "TokenSource",
    "ToolResult",
    "TrainingSample",
    "Trajectory",
    "Turn",
    "TurnKind",
    "Usage",
    "VersionSource",
    "VersionSpan",
    "WireModel",
    "trajectory_json_schema",
]

SCHEMA_VERSION = "envfarm.trajectory/1"


class Segment(WireModel):
    """A context segment restarted by a summary (self-summarization): segment ``index`` starts
    at turn ``first_turn`` from the system prompt and the instruction followed by ``summary``."""

    index: int
    summary: str
    """The summary that restarted the context."""
    first_turn: int
    summary_turn: int | None = None
    """The turn (``kind: "summary"``, the last of segment ``index - 1``) that wrote ``summary``."""
    context_budget: int | None = None
    """The context budget in tokens that the next prompt would have exceeded."""
    context_tokens: int | None = None
    """The size of that next prompt in tokens, as counted by the server plus an estimate of
    what was appended since (``context_estimated``)."""
    context_estimated: bool = False
    """True when ``context_tokens`` includes an estimate (docs/trajectory.md)."""
    prior_messages: list[dict[str, Any]] = Field(default_factory=list)
    """The chat messages of the context the summary replaced (segment ``index - 1``), from the
    system prompt to the summary reply."""


TestStatus = Literal["passed", "failed", "error", "skipped", "xfailed", "other"]


class ReportedTest(WireModel):
    """One test case of a report the verifier left (JUnit XML or CTRF JSON)."""

    name: str
    """The test's id: ``classname::name`` for JUnit XML, the test's name for CTRF."""
    status: TestStatus
    duration_s: float | None = None
    report: str
    """The report file it came from, relative to ``/logs/verifier``."""


class Reward(WireModel):
    value: float | None = None
    """The reward; null when no valid reward could be computed."""
    valid: bool = False
    """False for infrastructure faults: a trainer must not learn from this episode."""
    components: dict[str, float] = Field(default_factory=dict)
    flags: list[str] = Field(default_factory=list)
    """What grading noticed (``tamper:*``, ``report:*``, ``read:*``, ``git:*``; docs/grading.md).
    A flagged reward stays valid: cheating is a real outcome of the episode."""
    reason: str | None = None
    """Why the reward is what it is (or why it is invalid)."""
    flag_details: dict[str, list[str]] = Field(default_factory=dict)
    """Per flag, the paths or commands that raised it (a few each)."""
    tests: list[ReportedTest] = Field(default_factory=list)
    """Per-test results parsed from the verifier's reports."""


class JudgeAttempt(WireModel):
    """One reply of a rubric judge (a corrective retry follows a reply that was not a verdict)."""

    response: str | None = None
    """The judge's reply text exactly as received; null when the request itself failed."""
    problem: str | None = None
    """Why the reply was not a usable verdict (or why the request failed); null when it was."""
    latency_s: float = 0.0
    http_attempts: int = 1
    """Requests the client sent for this reply (transient failures are retried)."""


class JudgeCall(WireModel):
    """One rubric item judged by an LLM judge (docs/rubrics.md): what it was asked, what it said."""

    item: str
    """The ``[[verifier.rubrics]]`` item's name."""
    weight: float
    scale: float
    """The judge scored from 0 to ``scale``; ``score`` is normalized to 0..1."""
    prompt: str
    """The item's prompt, as the task author wrote it."""
    prompt_sha256: str
    """sha256 of the exact messages of the first request (instruction, item, diff, transcript)."""
    endpoint: str | None = None
    model: str | None = None
    attempts: list[JudgeAttempt] = Field(default_factory=list)
    score: float | None = None
    """The verdict in 0..1; null when the judge gave none (then the reward is invalid)."""
    raw_score: str | None = None
    """The score as the judge wrote it (e.g. ``0.8`` or ``7/10``)."""
    reason: str | None = None
    """The judge's one-sentence reason."""
    latency_s: float = 0.0
    """Wall-clock time of the whole item, retries included."""
    error: str | None = None
    """Why no verdict came: the endpoint failed, or no reply could be read as one."""


class Timings(WireModel):
    build_s: float | None = None
    provision_s: float | None = None
    agent_s: float | None = None
    grading_s: float | None = None
    teardown_s: float | None = None
    total_s: float | None = None
    phases: dict[str, float] = Field(default_factory=dict)
    """The parts of provisioning and grading, in seconds (``snapshot_before``, ``listing``,
    ``snapshot_after``, ``collect``, ``carry``, ``fork``, ``apply``, ``verifier``, ``test_sh``
    (the time inside ``tests/test.sh``), ``artifacts``...), for profiling; keys may change."""


class PolicyVersions(WireModel):
    min: str | None = None
    max: str | None = None


class Provenance(WireModel):
    task_hash: str
    """Content hash of the task directory."""
    image_id: str | None = None
    envfarm_version: str
    seed: int | None = None
    realism: Literal["workstation", "off"] | None = None
    """The sandbox's profile as the plan decided it (docs/sandbox.md); None: no plan was made."""
    forked_from: str | None = None
    """The warm environment this episode's sandbox is a copy of (its siblings in the group
    share it; None: started cold), so correlated rewards can be traced (docs/fork.md)."""
    fork_method: str | None = None
    """How the copy was made (``snapshot+restart``: file systems snapshotted, processes
    started again on them)."""


StopReason = Literal["submitted", "no_tool_call", "max_turns", "timeout", "context_length", "error"]


class AgentOutcome(WireModel):
    stop_reason: StopReason
    """Why the agent loop ended. Model-side limits are real outcomes and still get graded."""
    turns: int = 0
    malformed_tool_calls: int = 0


class AgentInfo(WireModel):
    """The harness that produced the session: ``builtin`` (envfarm's loop) or an installed one."""

    name: str
    version: str | None = None
    exit_code: int | None = None
    """An installed agent's exit code (None: stopped by envfarm, or the built-in loop)."""
    output_tail: str | None = None
    """The end of an installed agent's own output."""
    requests: list[dict[str, Any]] = Field(default_factory=list)
    """An installed agent's requests as it sent them (before any translation), each kept as
    its difference from the one before (``_prefix``, ``_same``; docs/agents.md)."""


class ErrorInfo(WireModel):
    type: str
    message: str
    phase: Literal["build", "provision", "agent", "grading", "teardown"]
    infrastructure: bool = True
    """True when the fault is envfarm's or the endpoint's, not the model's."""
    retryable: bool = False
    """True when another attempt may succeed (a sandbox died, the endpoint was unreachable)."""


class StepResult(WireModel):
    """One step of a multi-step task (``[[steps]]``): its own reward, and its turns."""

    name: str
    reward: Reward = Field(default_factory=Reward)
    """The step's tests' verdict; invalid (with the reason) when the step was not graded."""
    first_turn: int | None = None
    """The index of the step's first turn; null when its agent made no model call."""
    last_turn: int | None = None
    stop_reason: StopReason | None = None
    """How the step's agent stopped (null: it did not run, its setup having failed)."""


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
    steps: list[StepResult] = Field(default_factory=list)
    """A multi-step task's steps that ran, in order (docs/trajectory.md); empty otherwise."""
    reward: Reward = Field(default_factory=Reward)
    timings: Timings = Field(default_factory=Timings)
    policy_versions: PolicyVersions = Field(default_factory=PolicyVersions)
    advantage: float | None = None
    """Group-relative advantage, set when the group completes."""
    group_zero_variance: bool | None = None
    """True when the group's valid rewards do not vary (advantage 0, nothing to learn)."""
    model: str | None = None
    outcome: AgentOutcome | None = None
    agent: AgentInfo | None = None
    """None: envfarm's built-in loop."""
    error: ErrorInfo | None = None
    provenance: Provenance
    artifacts: str | None = None
    """Where this episode's grading artifacts were kept, relative to the run's output directory
    (``artifacts/<episode_id>``); null when none were kept."""
    judge_calls: list[JudgeCall] = Field(default_factory=list)
    """Every rubric judge call of the grading phase, in ``[[verifier.rubrics]]`` order."""
    samples: list[TrainingSample] | None = None
    """Merged training samples; computed on output when asked for (``--samples``), else null."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, use_attribute_docstrings=True)

    def to_json(self, *, compact_tokens: bool = False, samples: bool = False) -> str:
        """The output form: every turn's full ``prompt_token_ids`` unless ``compact_tokens``;
        merged training samples added when ``samples``."""
        turns = compacted_turns(self.turns) if compact_tokens else expanded_turns(self.turns)
        update: dict[str, object] = {"turns": turns}
        if samples:
            update["samples"] = training_samples(self.turns)
        return self.model_copy(update=update).model_dump_json(by_alias=True)


def trajectory_json_schema() -> dict[str, Any]:
    return Trajectory.model_json_schema(by_alias=True, mode="serialization")
