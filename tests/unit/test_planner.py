"""``plan_episode`` as a table: task, job and default, and which of them decided each value."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest

from envfarm.errors import EnvironmentUnsupported
from envfarm.plan.models import EngineFacts, JobChoices, RuntimeInfo
from envfarm.plan.planner import plan_episode
from envfarm.settings import Settings
from envfarm.spec.task import Task, load_task

DOCKER = EngineFacts(
    backend="Docker engine",
    runtimes={
        "runc": RuntimeInfo(),
        "runsc": RuntimeInfo(gvisor=True, networked=False),
        "runsc-net": RuntimeInfo(gvisor=True, networked=True),
    },
    gvisor_runtime="runsc",
)


def make_task(root: Path, toml: str = "", compose: str | None = None) -> Task:
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "task.toml").write_text(toml)
    (root / "instruction.md").write_text("do it\n")
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    if compose is not None:
        (root / "environment" / "docker-compose.yaml").write_text(compose)
    (root / "tests" / "test.sh").write_text("true\n")
    return load_task(root)


@pytest.mark.parametrize(
    ("toml", "job", "default", "network", "source"),
    [
        ("", None, "task-default", True, "default"),
        ("", None, "none", False, "default"),
        ("", "none", "task-default", False, "job"),
        ("", "task-default", "none", True, "job"),
        (
            '[verifier]\nnetwork_mode = "no-network"\n',
            "task-default",
            "task-default",
            False,
            "task",
        ),
        ('[verifier]\nnetwork_mode = "public"\n', "none", "none", True, "task"),
        ('[environment]\nnetwork_mode = "public"\n', "none", "none", True, "task"),
        (
            '[verifier]\nenvironment_mode = "shared"\n',
            "task-default",
            "task-default",
            False,
            "task",
        ),
        ('[verifier]\nenvironment_mode = "separate"\n', None, "task-default", True, "default"),
    ],
)
def test_the_verifier_network_task_over_job_over_default(
    tmp_path: Path, toml: str, job: str | None, default: str, network: bool, source: str
) -> None:
    task = make_task(tmp_path / "t", toml)
    plan = plan_episode(
        task,
        JobChoices(verifier_network=job),
        Settings(verifier_network=default),
    )
    assert plan.verifier.network is network
    assert plan.sandbox.verifier_network is network
    assert plan.decided["verifier.network"].source == source
    assert ("no network" in plan.verifier.reason) is not network


@pytest.mark.parametrize(
    ("job", "default", "outbound", "source"),
    [
        (None, "public", True, "default"),
        (None, "none", False, "default"),
        ("none", "public", False, "job"),
        ("public", "none", True, "job"),
    ],
)
def test_the_sidecars_network_job_over_default_never_the_agents(
    tmp_path: Path, job: Literal["public", "none"] | None, default: str, outbound: bool, source: str
) -> None:
    task = make_task(tmp_path / "t", compose="services:\n  db:\n    image: redis:7\n")
    plan = plan_episode(task, JobChoices(sidecar_network=job), Settings(sidecar_network=default))
    assert plan.sandbox.sidecar_network is outbound
    assert plan.sandbox.agent_network is False
    assert plan.decided["sandbox.sidecar_network"].source == source


FORKING = DOCKER.model_copy(update={"fork_unsupported": None})
COMPOSE = "services:\n  db:\n    image: redis:7\n"
HEALTHCHECK = '[environment.healthcheck]\ncommand = "true"\n'


@pytest.mark.parametrize(
    ("compose", "toml", "job", "default", "group", "facts", "fork", "source", "why"),
    [
        (COMPOSE, "", None, "auto", 16, FORKING, True, "default", "copies of one warm"),
        (None, HEALTHCHECK, "auto", "off", 4, FORKING, True, "job", "copies of one warm"),
        (COMPOSE, "", "off", "auto", 16, FORKING, False, "job", "fork off"),
        (COMPOSE, "", None, "off", 16, FORKING, False, "default", "fork off"),
        (COMPOSE, "", None, "auto", 1, FORKING, False, "default", "a group of one"),
        (COMPOSE, "", None, "auto", 16, DOCKER, False, "default", "cannot fork"),
        (None, "", "auto", "auto", 16, FORKING, False, "task", "single container"),
    ],
)
def test_fork_job_over_default_when_the_engine_and_the_task_allow(
    tmp_path: Path,
    compose: str | None,
    toml: str,
    job: Literal["auto", "off"] | None,
    default: Literal["auto", "off"],
    group: int,
    facts: EngineFacts,
    fork: bool,
    source: str,
    why: str,
) -> None:
    task = make_task(tmp_path / "t", toml, compose=compose)
    choices = JobChoices(fork=job, group_size=group)
    plan = plan_episode(task, choices, Settings(fork=default), facts)
    assert plan.sandbox.fork is fork
    assert plan.decided["sandbox.fork"].source == source
    assert why in plan.decided["sandbox.fork"].reason


@pytest.mark.parametrize(
    ("toml", "job", "default", "realism", "source"),
    [
        ("", None, "off", "off", "default"),
        ("", None, "workstation", "workstation", "default"),
        ("", "workstation", "off", "workstation", "job"),
        ("", "off", "workstation", "off", "job"),
        ('[environment]\nrealism = "workstation"\n', "off", "off", "workstation", "task"),
        ('[environment]\nrealism = "off"\n', "workstation", "workstation", "off", "task"),
    ],
)
def test_the_realism_task_over_job_over_default(
    tmp_path: Path,
    toml: str,
    job: Literal["workstation", "off"] | None,
    default: Literal["workstation", "off"],
    realism: str,
    source: str,
) -> None:
    task = make_task(tmp_path / "t", toml)
    plan = plan_episode(task, JobChoices(realism=job), Settings(realism=default))
    assert plan.sandbox.realism == realism
    assert plan.decided["sandbox.realism"].source == source
    assert realism in plan.decided["sandbox.realism"].reason


@pytest.mark.parametrize(
    ("toml", "job", "default", "runtime", "source"),
    [
        ("", None, None, None, "default"),
        ("", None, "runsc", "runsc", "default"),
        ("", "runsc", "runc", "runsc", "job"),
        ('[environment]\nruntime = "gvisor"\n', None, None, "runsc", "task"),
        ('[environment]\nruntime = "gvisor"\n', "runc", None, "runsc", "task"),
        ('[environment]\nruntime = "gvisor"\n', "runsc-net", None, "runsc-net", "task"),
    ],
)
def test_the_runtime_task_over_job_over_default(
    tmp_path: Path, toml: str, job: str | None, default: str | None, runtime: str, source: str
) -> None:
    task = make_task(tmp_path / "t", toml)
    plan = plan_episode(task, JobChoices(runtime=job), Settings(runtime=default), DOCKER)
    assert plan.sandbox.runtime == runtime
    assert plan.sandbox.runtime_is_gvisor is (runtime is not None and "runsc" in runtime)
    assert plan.decided["sandbox.runtime"].source == source


@pytest.mark.parametrize(
    ("toml", "compose", "runtime", "message"),
    [
        (
            '[agent]\nnetwork_mode = "public"\n',
            None,
            "runsc",
            r"--network=none.*'public' in the agent",
        ),
        ("", "services:\n  cache:\n    image: redis:7\n", "runsc", r"its services \(cache\)"),
        ('[agent]\nnetwork_mode = "public"\n', None, "runsc-net", "network changes between"),
        ("", None, "kata", r"no runtime 'kata' \(registered: runc, runsc, runsc-net\)"),
    ],
)
def test_what_a_runtime_cannot_give_is_refused(
    tmp_path: Path, toml: str, compose: str | None, runtime: str, message: str
) -> None:
    task = make_task(tmp_path / "t", toml, compose)
    with pytest.raises(EnvironmentUnsupported, match=message) as refused:
        plan_episode(task, JobChoices(runtime=runtime), Settings(), DOCKER)
    assert not refused.value.infrastructure


def test_a_task_asking_for_gvisor_where_there_is_none_is_refused(tmp_path: Path) -> None:
    task = make_task(tmp_path / "t", '[environment]\nruntime = "gvisor"\n')
    bare = EngineFacts(runtimes={"runc": RuntimeInfo()})
    with pytest.raises(EnvironmentUnsupported, match="no gVisor runtime"):
        plan_episode(task, facts=bare)


def test_the_agent_and_the_clean_room_as_planned(tmp_path: Path) -> None:
    toml = (
        '[agent]\ntimeout_sec = 90\nuser = "nobody"\ncontext_budget_tokens = 4000\n'
        '[environment]\nworkdir = "/app"\n[verifier]\ntimeout_sec = 30\n'
    )
    task = make_task(tmp_path / "t", toml)
    plan = plan_episode(
        task, JobChoices(max_turns=7, context_budget=8000), Settings(clean_room="fresh")
    )
    agent = plan.agent
    assert (agent.max_turns, agent.timeout_s, agent.context_budget) == (7, 90.0, 4000)
    assert (agent.workdir, agent.user) == ("/app", "nobody")
    assert plan.sandbox.clean_room == plan.verifier.clean_room == "fresh"
    assert plan.verifier.reason.startswith("clean: in a fresh container")
    assert (plan.sandbox.agent_timeout_s, plan.sandbox.verifier_timeout_s) == (90.0, 30.0)
    assert not plan.sandbox.agent_network
    assert plan.decided["sandbox.agent_network"].source == "default"


def test_the_plan_reads_back_from_its_json(tmp_path: Path) -> None:
    task = make_task(tmp_path / "t", '[verifier]\nenvironment_mode = "shared"\n')
    plan = plan_episode(task, JobChoices(runtime="runsc"), Settings(), DOCKER)
    text = plan.to_json()
    assert '"schema": "envfarm.plan/1"' in text
    assert type(plan).model_validate_json(text) == plan
    assert (
        plan.sandbox.key()
        == plan_episode(task, JobChoices(runtime="runsc"), facts=DOCKER).sandbox.key()
    )
    assert plan.sandbox.key() != plan_episode(task, facts=DOCKER).sandbox.key()
