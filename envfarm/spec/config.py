"""Pydantic models of a Harbor ``task.toml`` (schema 1.0 to 1.4) as envfarm understands it.

The models are the canonical form: strict types and unknown fields rejected, so envfarm's own
code never reads a key it does not declare. ``spec.task_toml`` reads the raw TOML data as
Harbor's parser does: it applies Harbor's backwards compatibility (root ``version`` ->
``schema_version``, where ``schema_version`` wins; ``allow_internet``, ``memory`` and
``storage``), takes the keys no model declares out into a record of their own
(``spec.tolerated``: warnings, never a refusal, as Harbor ignores them), accepts any schema
string (a warning when it is not one envfarm knows), then validates.

Refused is only a Harbor feature envfarm cannot honour yet whose absence would change what the
task means (multi-step tasks, a verifier image of its own, allowlisted networks, GPUs,
skills...): "not supported by envfarm yet", naming the field and why, instead of running a
different task than its author wrote. Such keys with an empty value are harmless and dropped.

Network access is the one deliberate difference in meaning: Harbor's default is ``public``;
envfarm's agent phase has no network unless the task asks for ``public``. The verifier's phase of
a task that sets no network field gets Harbor's ``public`` only in a fresh container, and only
while the run's setting allows it (``spec.network``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)

from envfarm.spec.mcp import McpServer, merge_by_name
from envfarm.spec.network import VerifierNetworkDefault, verifier_network_default

SUPPORTED_SCHEMA_VERSIONS = ("1.0", "1.1", "1.2", "1.3", "1.4")
NOT_YET = "not supported by envfarm yet"
_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")


def _no_allowed_hosts(hosts: list[str]) -> list[str]:
    if hosts:
        raise ValueError(
            f"allowed_hosts needs network_mode 'allowlist', which is {NOT_YET}; remove "
            "allowed_hosts and set network_mode to 'public' or 'no-network'"
        )
    return hosts


def _shell_names(env: dict[str, str]) -> dict[str, str]:
    bad = [key for key in env if not _SHELL_NAME.fullmatch(key)]
    if bad:
        raise ValueError(
            f"invalid variable name(s) {', '.join(map(repr, bad))}: names are letters, digits "
            "and '_', not starting with a digit"
        )
    return env


def _user_name(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"a UID is a non-negative integer, got {value}")
        return str(value)
    if value == "":
        raise ValueError("expected a user name or UID, got an empty string")
    return value


def _absolute(path: str | None) -> str | None:
    if path is not None and not path.startswith("/"):
        raise ValueError(f"must be an absolute path inside the container, got {path!r}")
    return path


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


def _refuse(refused: str, message: str) -> BeforeValidator:
    """A validator for a Harbor value envfarm cannot honour yet (not a plain literal error)."""

    def check(value: Any) -> Any:
        if value == refused:
            raise ValueError(message)
        return value

    return BeforeValidator(check)


def _no_gpus(gpus: int) -> int:
    if gpus > 0:
        raise ValueError(f"GPUs are {NOT_YET}; remove gpus or set it to 0")
    return gpus


NetworkMode = Annotated[
    Literal["no-network", "public"] | None,
    _refuse("allowlist", f"network_mode 'allowlist' is {NOT_YET}; use 'public' or 'no-network'"),
]
AllowedHosts = Annotated[list[str], AfterValidator(_no_allowed_hosts)]
EnvVars = Annotated[dict[str, str], AfterValidator(_shell_names)]
Seconds = Annotated[float, Field(gt=0)]
UserName = Annotated[str | None, BeforeValidator(_user_name)]


EnvironmentMode = Literal["clean", "shared", "separate"]
"""Where the verifier runs (docs/grading.md): a fresh container with the agent's changes, the
agent's own, or a fresh one with the declared artifacts alone (Harbor's modes)."""


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class HealthcheckConfig(_Table):
    """Mirrors Docker HEALTHCHECK: ``retries`` consecutive passes before the agent starts."""

    command: Annotated[str, Field(min_length=1)]
    interval_sec: Seconds = 5
    timeout_sec: Seconds = 30
    start_period_sec: Annotated[float, Field(ge=0)] = 0
    start_interval_sec: Seconds = 5
    retries: Annotated[int, Field(ge=1)] = 3


class AgentConfig(_Table):
    timeout_sec: Seconds | None = None
    user: UserName = None
    network_mode: NetworkMode = None
    allowed_hosts: AllowedHosts = Field(default_factory=list)
    context_budget_tokens: Annotated[int, Field(gt=0)] | None = None
    """envfarm extension: prompt tokens before the agent summarizes its work and restarts its
    context from the instruction and the summary (the smaller of this and the run's budget)."""


_RUBRIC_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def _rubric_name(name: str) -> str:
    if not _RUBRIC_NAME.fullmatch(name):
        raise ValueError(f"expected a name made of letters, digits, '.', '_' and '-', got {name!r}")
    return name


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    return text


def _unique_rubric_names(items: list[RubricItem]) -> list[RubricItem]:
    names = [item.name for item in items]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"rubric item names must be unique; repeated: {', '.join(repeated)}")
    return items


class RubricItem(_Table):
    """One ``[[verifier.rubrics]]`` item, judged on its own by an LLM judge (docs/rubrics.md)."""

    name: Annotated[str, AfterValidator(_rubric_name)]
    weight: Annotated[float, Field(gt=0)] = 1.0
    prompt: Annotated[str, AfterValidator(_not_blank)]
    """What the judge scores, in the task author's words."""
    scale: Annotated[float, Field(gt=0)] = 1.0
    """The judge scores from 0 to ``scale``; envfarm divides by ``scale`` (scores are 0..1)."""


class RubricScoring(_Table):
    """``[verifier.rubric]``: how rubric scores combine with the test reward."""

    tests_weight: Annotated[float, Field(ge=0)] = 1.0
    """Weight of the test reward in the weighted mean with the rubric items' weights."""
    min_tests_reward: float | None = None
    """Below this test reward the items are not judged and score 0 (None: always judged)."""


_FLAG_PATTERN = re.compile(r"\*|[a-z_]+:[A-Za-z0-9_*?\[\]-]+")
_REPORT_NAME = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*")


def _flag_patterns(value: Any) -> Any:
    """``true`` means every flag, ``false`` none; else a list of glob patterns."""
    if value is True:
        return ["*"]
    if value is False:
        return []
    return value


def _valid_flag_patterns(patterns: list[str]) -> list[str]:
    bad = [p for p in patterns if not _FLAG_PATTERN.fullmatch(p)]
    if bad:
        raise ValueError(
            f"invalid flag pattern(s) {', '.join(map(repr, bad))}: expected 'category:name' "
            "globs such as 'tamper:*' or 'report:missing', or '*' for every flag"
        )
    return patterns


def _test_ids(ids: list[str]) -> list[str]:
    blank = [i for i in ids if not i.strip()]
    if blank:
        raise ValueError("test ids must not be empty")
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ValueError(f"repeated test id(s): {', '.join(map(repr, repeated))}")
    return ids


def _report_names(names: list[str]) -> list[str]:
    for name in names:
        relative = name.removeprefix("/logs/verifier/")
        if not _REPORT_NAME.fullmatch(relative) or ".." in relative.split("/"):
            raise ValueError(
                f"expected a file under /logs/verifier (e.g. 'junit.xml'), got {name!r}"
            )
    return [name.removeprefix("/logs/verifier/") for name in names]


def _main_container_only(service: str | None) -> str | None:
    if service is not None:
        raise ValueError(
            f"running in a service container is {NOT_YET}; remove 'service' and reach the "
            "service from the main container (e.g. pg_dump -h db ...)"
        )
    return service


class CollectHook(_Table):
    """``[[verifier.collect]]``: a command run after the agent, before the verifier; the files
    it writes under ``/logs/artifacts`` are kept with the episode's artifacts."""

    command: Annotated[str, Field(min_length=1)]
    service: Annotated[str | None, AfterValidator(_main_container_only)] = None
    timeout_sec: Seconds = 60
    user: UserName = None


def _artifact_entry(value: Any) -> Any:
    return {"source": value} if isinstance(value, str) else value


class ArtifactSpec(_Table):
    """One root ``artifacts`` entry: a path in the container copied out after the agent."""

    source: Annotated[str, AfterValidator(_absolute)]
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


class VerifierConfig(_Table):
    timeout_sec: Seconds = 600
    env: EnvVars = Field(default_factory=dict)
    """Values keep ``${VAR}`` / ``${VAR:-default}`` templates; resolved when grading."""
    user: UserName = None
    environment_mode: EnvironmentMode = "clean"
    """Where tests/test.sh runs (docs/grading.md). ``clean``, envfarm's default and an extension
    of Harbor's field: a fresh main container of the environment that receives only what the
    agent changed in the workdir and the declared ``artifacts``, with the workdir's original
    test files. ``shared`` (Harbor's default): the agent's container, after the agent.
    ``separate``: a fresh main container that receives only the declared ``artifacts`` and
    ``/logs/artifacts``. Fresh containers share the sidecars, network and volumes."""
    network_mode: NetworkMode = None
    allowed_hosts: AllowedHosts = Field(default_factory=list)
    rubrics: Annotated[list[RubricItem], AfterValidator(_unique_rubric_names)] = Field(
        default_factory=list
    )
    """``[[verifier.rubrics]]``: items an LLM judge scores after the tests (docs/rubrics.md)."""
    rubric: RubricScoring = Field(default_factory=RubricScoring)
    collect: list[CollectHook] = Field(default_factory=list)
    zero_on_flags: Annotated[
        list[str], BeforeValidator(_flag_patterns), AfterValidator(_valid_flag_patterns)
    ] = Field(default_factory=lambda: ["report:*"])
    """Flags (glob patterns) that zero a valid reward; ``true`` means any flag (docs/grading.md).
    The default zeroes a reward whose test report is missing or contradicts itself."""
    fail_to_pass: Annotated[list[str], AfterValidator(_test_ids)] = Field(default_factory=list)
    """SWE-bench style: tests that must pass (ids as in the reports); when set with
    ``pass_to_pass``, the reward is 1 only when every listed test passed."""
    pass_to_pass: Annotated[list[str], AfterValidator(_test_ids)] = Field(default_factory=list)
    reports: Annotated[list[str], AfterValidator(_report_names)] = Field(default_factory=list)
    """Test reports (JUnit XML or CTRF JSON) tests/test.sh writes under /logs/verifier; a
    declared report that is missing raises ``report:missing``."""

    @model_validator(mode="after")
    def _disjoint_test_lists(self) -> VerifierConfig:
        both = sorted(set(self.fail_to_pass) & set(self.pass_to_pass))
        if both:
            raise ValueError(
                f"test id(s) in both fail_to_pass and pass_to_pass: {', '.join(map(repr, both))}"
            )
        return self


class EnvironmentConfig(_Table):
    build_timeout_sec: Seconds = 600
    docker_image: Annotated[str, Field(min_length=1)] | None = None
    os: Annotated[
        Literal["linux"],
        _refuse("windows", f"os 'windows' is {NOT_YET}; envfarm runs Linux containers"),
    ] = "linux"
    cpus: Annotated[float, Field(gt=0)] = 1
    memory_mb: Annotated[int, Field(ge=64)] = 2048
    storage_mb: Annotated[int, Field(ge=1)] = 10240
    gpus: Annotated[int, Field(ge=0), AfterValidator(_no_gpus)] = 0
    env: EnvVars = Field(default_factory=dict)
    workdir: Annotated[str | None, AfterValidator(_absolute)] = None
    network_mode: NetworkMode = None
    allowed_hosts: AllowedHosts = Field(default_factory=list)
    healthcheck: HealthcheckConfig | None = None
    mcp_servers: Annotated[list[McpServer], AfterValidator(merge_by_name)] = Field(
        default_factory=list
    )
    """``[[environment.mcp_servers]]``: MCP servers offered to the agent (``spec.mcp``)."""
    runtime: Literal["gvisor"] | None = None
    """envfarm extension: ``"gvisor"`` runs the task's sandboxes under gVisor whatever the
    run's runtime (docs/sandbox.md); unset, the run decides (``envfarm run --runtime``)."""


class SolutionConfig(_Table):
    env: EnvVars = Field(default_factory=dict)


class Author(_Table):
    name: str
    email: str | None = None


class TaskInfo(_Table):
    name: Annotated[str | None, AfterValidator(_task_name)] = None
    version: str | None = None
    description: str | None = None
    authors: list[Author] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)


class TaskConfig(_Table):
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
