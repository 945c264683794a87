"""Pydantic models of a Harbor ``task.toml`` (schema 1.0 to 1.4) as envfarm understands it.

The models are the canonical form: strict types and unknown fields rejected, so envfarm's own
code never reads a key it does not declare. ``spec.task_toml`` reads the raw TOML data as
Harbor's parser does: it applies Harbor's backwards compatibility (root ``version`` ->
``schema_version``, where ``schema_version`` wins; ``allow_internet``, ``memory`` and
``storage``), takes the keys no model declares out into a record of their own
(``spec.tolerated``: warnings, never a refusal, as Harbor ignores them), accepts any schema
string (a warning when it is not one envfarm knows), then validates.

The tables of ``[verifier]`` are in ``spec.verifier_config`` and the value types the tables
share in ``spec.config_values``; every model is importable from here.

Refused is only a Harbor feature envfarm cannot honour yet whose absence would change what the
task means (allowlisted networks, GPUs...): "not supported
by envfarm yet", naming the field and why, instead of running a different task than its author
wrote. Such keys with an empty value are harmless and dropped.

Network access is the one deliberate difference in meaning: Harbor's default is ``public``;
envfarm's agent phase has no network unless the task asks for ``public``. The verifier's phase of
a task that sets no network field gets Harbor's ``public`` only in a fresh container, and only
while the run's setting allows it (``spec.network``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field

from envfarm.spec.config_values import (
    NOT_YET,
    AllowedHosts,
    EnvVars,
    NetworkMode,
    Seconds,
    Table,
    UserName,
    absolute,
    refuse,
)
from envfarm.spec.mcp import McpServer, merge_by_name
from envfarm.spec.network import VerifierNetworkDefault, verifier_network_default
from envfarm.spec.verifier_config import (
    CollectHook,
    EnvironmentMode,
    RubricItem,
    RubricScoring,
    VerifierConfig,
)

__all__ = [
    "NOT_YET",
    "SUPPORTED_SCHEMA_VERSIONS",
    "AgentConfig",
    "ArtifactSpec",
    "Author",
    "CollectHook",
    "EnvironmentConfig",
    "EnvironmentMode",
    "HealthcheckConfig",
    "RubricItem",
    "RubricScoring",
    "SolutionConfig",
    "StepConfig",
    "TaskConfig",
    "TaskInfo",
    "VerifierConfig",
]

SUPPORTED_SCHEMA_VERSIONS = ("1.0", "1.1", "1.2", "1.3", "1.4")
_STEP_NAME = re.compile(r'[^<>:"/\\|?*\x00-\x1f\x7f]{1,255}')
_TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")


def _schema_text(version: Any) -> Any:
    """Harbor treats the schema version as a free string; a TOML number means its text."""
    if isinstance(version, int | float) and not isinstance(version, bool):
        return str(version)
    return version


def _task_name(name: str | None) -> str | None:
    if name is not None and (not _TASK_NAME.fullmatch(name) or ".." in name):
        raise ValueError(
            f"expected 'name' or 'org/name' made of letters, digits, '.', '_' and '-', got {name!r}"
        )
    return name


def step_name(name: str) -> str:
    """A step's name is one portable directory name under ``steps/`` (Harbor's rule)."""
    if not _STEP_NAME.fullmatch(name) or name in {".", ".."} or name.endswith((".", " ")):
        raise ValueError(
            "expected a directory name under steps/ (no path separators, control or reserved "
            f"characters, no trailing '.' or space), got {name!r}"
        )
    return name


def _no_gpus(gpus: int) -> int:
    if gpus > 0:
        raise ValueError(f"GPUs are {NOT_YET}; remove gpus or set it to 0")
    return gpus


class HealthcheckConfig(Table):
    """Mirrors Docker HEALTHCHECK: ``retries`` consecutive passes before the agent starts."""

    command: Annotated[str, Field(min_length=1)]
    interval_sec: Seconds = 5
    timeout_sec: Seconds = 30
    start_period_sec: Annotated[float, Field(ge=0)] = 0
    start_interval_sec: Seconds = 5
    retries: Annotated[int, Field(ge=1)] = 3


class AgentConfig(Table):
    timeout_sec: Seconds | None = None
    user: UserName = None
    network_mode: NetworkMode = None
    allowed_hosts: AllowedHosts = Field(default_factory=list)
    context_budget_tokens: Annotated[int, Field(gt=0)] | None = None
    """envfarm extension: prompt tokens before the agent summarizes its work and restarts its
    context from the instruction and the summary (the smaller of this and the run's budget)."""


def _artifact_entry(value: Any) -> Any:
    return {"source": value} if isinstance(value, str) else value


class ArtifactSpec(Table):
    """One root ``artifacts`` entry: a path in the container copied out after the agent."""

    source: Annotated[str, AfterValidator(absolute)]
    destination: Annotated[str, Field(min_length=1)] | None = None
    """Where it goes under the episode's ``collected/files/``; default: the source path."""
    exclude: list[str] = Field(default_factory=list)
    """Glob patterns (tar ``--exclude``) left out of a directory."""
    service: Annotated[str, Field(min_length=1)] | None = None
    """A compose service to copy it from (``main`` or unset: the main container); a sidecar's
    is copied at the end of the episode, for the record (the verifier does not receive it)."""

    @property
    def sidecar(self) -> str | None:
        """The sidecar it comes from; None for the main container."""
        return None if self.service in (None, "main") else self.service


class EnvironmentConfig(Table):
    build_timeout_sec: Seconds = 600
    docker_image: Annotated[str, Field(min_length=1)] | None = None
    os: Annotated[
        Literal["linux"],
        refuse("windows", f"os 'windows' is {NOT_YET}; envfarm runs Linux containers"),
    ] = "linux"
    cpus: Annotated[float, Field(gt=0)] = 1
    memory_mb: Annotated[int, Field(ge=64)] = 2048
    storage_mb: Annotated[int, Field(ge=1)] = 10240
    gpus: Annotated[int, Field(ge=0), AfterValidator(_no_gpus)] = 0
    env: EnvVars = Field(default_factory=dict)
    workdir: Annotated[str | None, AfterValidator(absolute)] = None
    network_mode: NetworkMode = None
    allowed_hosts: AllowedHosts = Field(default_factory=list)
    healthcheck: HealthcheckConfig | None = None
    mcp_servers: Annotated[list[McpServer], AfterValidator(merge_by_name)] = Field(
        default_factory=list
    )
    """``[[environment.mcp_servers]]``: MCP servers offered to the agent (``spec.mcp``)."""
    skills_dir: str | None = None
    """Agent skills in the environment, handed to the agent as Harbor does (``agent/skills.py``;
    empty: none)."""
    runtime: Literal["gvisor"] | None = None
    """envfarm extension: ``"gvisor"`` runs the task's sandboxes under gVisor whatever the
    run's runtime (docs/sandbox.md); unset, the run decides (``envfarm run --runtime``)."""
    realism: Literal["workstation", "off"] | None = None
    """envfarm extension: the sandboxes' profile whatever the run's (docs/sandbox.md); unset,
    the run decides (``envfarm run --realism``)."""


class SolutionConfig(Table):
    env: EnvVars = Field(default_factory=dict)


class Author(Table):
    name: str
    email: str | None = None


class TaskInfo(Table):
    name: Annotated[str | None, AfterValidator(_task_name)] = None
    version: str | None = None
    description: str | None = None
    authors: list[Author] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)


class StepConfig(Table):
    """One ``[[steps]]`` entry of a multi-step task: its files are under ``steps/<name>/``
    (``spec.steps``, which also refuses the step fields envfarm cannot honour yet)."""

    name: Annotated[str, AfterValidator(step_name)]
    agent: AgentConfig = Field(default_factory=AgentConfig)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    min_reward: float | dict[str, float] | None = None
    """Below it (a float gates ``reward``, a table each key), the remaining steps do not run."""
    healthcheck: HealthcheckConfig | None = None
    """Run after the step's setup, before its agent; failing it ends the steps there."""
    artifacts: list[Annotated[ArtifactSpec, BeforeValidator(_artifact_entry)]] = Field(
        default_factory=list
    )


class TaskConfig(Table):
    schema_version: Annotated[str, BeforeValidator(_schema_text)] = "1.4"
    """Any string (as in Harbor); one envfarm does not know is read as 1.4, with a warning."""
    source: str | None = None
    task: TaskInfo = Field(default_factory=TaskInfo)
    metadata: dict[str, Any] = Field(default_factory=dict)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    solution: SolutionConfig = Field(default_factory=SolutionConfig)
    artifacts: list[Annotated[ArtifactSpec, BeforeValidator(_artifact_entry)]] = Field(
        default_factory=list
    )
    """Paths in the container copied out after the agent (Harbor's ``artifacts``)."""
    steps: list[StepConfig] | None = None
    """``[[steps]]``: a multi-step task, its steps run in order in one sandbox."""
    multi_step_reward_strategy: Literal["mean", "final"] | None = None
    """How the episode's reward comes from its steps' (None on a multi-step task: ``mean``)."""

    def agent_network(self) -> bool:
        """May the agent phase reach the network? Unset everywhere means no (Harbor: yes)."""
        mode = self.agent.network_mode or self.environment.network_mode
        return mode == "public"

    def verifier_network_set(self) -> bool | None:
        """The task's own answer for the verifier's phase; None when no network field is set."""
        mode = self.verifier.network_mode or self.environment.network_mode
        return None if mode is None else mode == "public"

    def verifier_network(self, default: VerifierNetworkDefault | None = None) -> bool:
        """May tests/test.sh reach the network? The task's own answer, else Harbor's ``public``
        when the verifier runs in a fresh container and the run's setting (``default``, else
        ``ENVFARM_VERIFIER_NETWORK``) is ``task-default``; else no."""
        chosen = self.verifier_network_set()
        if chosen is not None:
            return chosen
        if self.verifier.environment_mode == "shared":
            return False
        return (default or verifier_network_default()) == "task-default"

    def verifier_network_implied(self, default: VerifierNetworkDefault | None = None) -> bool:
        """True when the verifier gets the network only from Harbor's default."""
        return self.verifier_network_set() is None and self.verifier_network(default)
