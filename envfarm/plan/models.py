"""The plan of one episode, as values: written to ``artifacts/<episode>/plan.json``.

``EnvironmentSpec`` is the task's environment as a backend builds and starts it (the same for
every job); ``SandboxSpec`` adds what the plan decided for one job's sandboxes (runtime,
networks, the clean room); ``AgentPlan`` and ``VerifierPlan`` say how the agent and the
verifier run. ``decided`` records, for each choice a job or a default could make, which source
made it (``task`` > ``job`` > ``default``) and why.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from envfarm.settings import CleanRoom, Realism
from envfarm.spec.compose import ComposeSpec
from envfarm.spec.config import ArtifactSpec, EnvironmentConfig, EnvironmentMode, VerifierConfig
from envfarm.spec.mcp import McpServer

PLAN_SCHEMA = "envfarm.plan/1"
DecisionSource = Literal["task", "job", "default"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Decision(_Frozen):
    source: DecisionSource
    reason: str


class EnvironmentSpec(_Frozen):
    """The task's environment: its images, files, services and ``[environment]`` table."""

    task_id: str
    task_hash: str
    root: Path
    environment_dir: Path
    dockerfile: Path | None
    """The main image's Dockerfile; None when the main image is a named one."""
    compose: ComposeSpec | None = None
    config: EnvironmentConfig
    """The ``[environment]`` table as read."""
    main_command: list[str] | None = None
    """The compose ``main`` service's own command (None: the container idles as under Harbor)."""
    main_entrypoint: list[str] | None = None
    """The compose ``main`` service's entrypoint (None: the image's ``ENTRYPOINT``)."""

    @property
    def sidecars(self) -> list[str]:
        return sorted(self.compose.sidecars) if self.compose is not None else []


class SandboxSpec(_Frozen):
    """One job's sandboxes of a task: the environment, with the plan's decisions."""

    environment: EnvironmentSpec
    runtime: str | None = None
    """The container runtime (Docker) or RuntimeClass (Kubernetes); None: the engine's."""
    runtime_is_gvisor: bool = False
    agent_network: bool = False
    verifier_network: bool = False
    """The verifier phase's network, so a sandbox is made ready for it (grading decides when)."""
    sidecar_network: bool = True
    """Compose sidecars' outbound network access (Harbor's default network); never the agent's."""
    verifier_mode: EnvironmentMode = "clean"
    clean_room: CleanRoom = "restart"
    agent_timeout_s: float
    verifier_timeout_s: float
    realism: Realism = "off"
    """``workstation``: the sandboxes look like a developer's machine (docs/sandbox.md)."""
    request_ratio: float = 0.5
    """Kubernetes: the share of its limits a pod requests (CPU, memory, disk)."""
    fork: bool = False
    """A group's sandboxes are copies of one warm environment (``sandbox/fork.py``), not
    each started cold."""

    @property
    def task_id(self) -> str:
        return self.environment.task_id

    def key(self) -> str:
        """Equal for sandboxes that are interchangeable (a warm pool's key)."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]


class AgentPlan(_Frozen):
    max_turns: int
    timeout_s: float
    command_timeout_s: float
    context_budget: int | None = None
    """Prompt tokens before the agent summarizes and restarts its context (the smaller of the
    task's and the job's)."""
    workdir: str | None = None
    user: str | None = None
    """The task's ``[agent] user``, else the workstation profile's developer, else None (the
    image's ``USER``)."""
    oracle_user: str | None = None
    """Who the oracle's commands run as: the task's ``[agent] user``, else None (the image's
    ``USER``, root by default), whatever the profile: the oracle validates the task."""
    mcp_servers: list[McpServer] = Field(default_factory=list)


class VerifierPlan(_Frozen):
    """How the verifier runs, and what grading reads of the task."""

    mode: EnvironmentMode
    network: bool
    agent_network: bool
    clean_room: CleanRoom
    """A clean room may be the agent's container restarted (``restart``) or is always fresh."""
    reason: str
    """One line: why the verifier runs where it does, with or without a network."""
    task_id: str
    task_hash: str
    task_root: Path
    tests_dir: Path
    instruction: str
    workdir: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    """The ``[environment]`` variables (the verifier's own are in ``config.env``)."""
    config: VerifierConfig
    artifacts: list[ArtifactSpec] = Field(default_factory=list)
    sidecars: list[str] = Field(default_factory=list)


class EpisodePlan(_Frozen):
    schema_: str = Field(default=PLAN_SCHEMA, alias="schema")
    task_id: str
    task_hash: str
    sandbox: SandboxSpec
    agent: AgentPlan
    verifier: VerifierPlan
    decided: dict[str, Decision] = Field(default_factory=dict)

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2) + "\n"


class RuntimeInfo(_Frozen):
    """A runtime as the engine has it registered."""

    gvisor: bool = False
    networked: bool = True
    """False for a gVisor runtime registered with ``--network=none``."""


class EngineFacts(_Frozen):
    """What the planner needs to know of the engine the sandboxes run on."""

    backend: str = "docker"
    runtimes: dict[str, RuntimeInfo] | None = None
    """The engine's runtimes by name; None: the backend cannot list them (names are taken as
    given, as a RuntimeClass is)."""
    gvisor_runtime: str | None = None
    """What a task that asks for gVisor runs under when the chosen runtime is not gVisor."""
    fork_unsupported: str | None = "the backend cannot fork a warm environment"
    """Why this engine cannot fork a warm environment into a group's sandboxes; None: it
    can (``sandbox/fork.py``)."""


class JobChoices(_Frozen):
    """A job's own answers to the choices a plan makes (None: the server's default)."""

    verifier_network: Literal["task-default", "none"] | None = None
    sidecar_network: Literal["public", "none"] | None = None
    runtime: str | None = None
    request_ratio: float | None = None
    realism: Realism | None = None
    fork: Literal["auto", "off"] | None = None
    group_size: int = 1
    """Episodes per task: a group of one has nothing to fork."""
    max_turns: int = 50
    context_budget: int | None = None
    command_timeout_s: float = 120.0
