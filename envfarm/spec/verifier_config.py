"""``[verifier]`` of ``task.toml``: where and how ``tests/test.sh`` grades, and what adds to it.

Beside Harbor's fields (timeout, env, user, network, ``environment_mode``) the table carries
envfarm's extensions, each documented on its field: rubric items an LLM judge scores
(docs/rubrics.md), collect hooks run before the verifier, flags that zero a reward, SWE-bench
test lists and the test reports to read (docs/grading.md). Where the verifier runs decides what
it can see, so ``EnvironmentMode`` is named here.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from envfarm.spec.config_values import (
    NOT_YET,
    AllowedHosts,
    EnvVars,
    NetworkMode,
    Seconds,
    Table,
    UserName,
)

EnvironmentMode = Literal["clean", "shared", "separate"]
"""Where the verifier runs (docs/grading.md): a fresh container with the agent's changes, the
agent's own, or a fresh one with the declared artifacts alone (Harbor's modes)."""


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


class RubricItem(Table):
    """One ``[[verifier.rubrics]]`` item, judged on its own by an LLM judge (docs/rubrics.md)."""

    name: Annotated[str, AfterValidator(_rubric_name)]
    weight: Annotated[float, Field(gt=0)] = 1.0
    prompt: Annotated[str, AfterValidator(_not_blank)]
    """What the judge scores, in the task author's words."""
    scale: Annotated[float, Field(gt=0)] = 1.0
    """The judge scores from 0 to ``scale``; envfarm divides by ``scale`` (scores are 0..1)."""


class RubricScoring(Table):
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


class CollectHook(Table):
    """``[[verifier.collect]]``: a command run after the agent, before the verifier; the files
    it writes under ``/logs/artifacts`` are kept with the episode's artifacts."""

    command: Annotated[str, Field(min_length=1)]
    service: Annotated[str | None, AfterValidator(_main_container_only)] = None
    timeout_sec: Seconds = 60
    user: UserName = None


class VerifierEnvironment(Table):
    """``[verifier.environment]``: the image of a verifier of its own (Harbor's separate verifier
    environment): ``docker_image``, else a ``Dockerfile`` in the task's ``tests/``, built with
    ``tests/`` as its context and holding the tests itself (``grading/verifier/own_image.py``).
    The keys of ``[environment]`` are accepted; the verifier's network is ``[verifier]``'s (an
    ``allow_internet`` here becomes its ``network_mode``), its limits the task's."""

    docker_image: Annotated[str, Field(min_length=1)] | None = None
    build_timeout_sec: Seconds = 600
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    env: EnvVars = Field(default_factory=dict)
    workdir: str | None = None


class VerifierConfig(Table):
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
    ``/logs/artifacts``; of the verifier's own image where the task has one (``environment``,
    or a ``Dockerfile`` in ``tests/``). Fresh containers share the sidecars, network and volumes."""
    environment: VerifierEnvironment | None = None
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
