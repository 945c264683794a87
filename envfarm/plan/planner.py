"""``plan_episode``: a task, a job's choices, the defaults and the engine's facts -> a plan.

Pure: no I/O, so every rule is a row of a table test (tests/unit/test_planner.py). One
precedence rule for every choice a job may make: a need the task itself declares in
``task.toml`` wins; else the job's field; else the server's or the command line's default
(``Settings``). The plan records which of them decided each value (``EpisodePlan.decided``).

The verifier's network: the task's own ``network_mode`` when it sets one; a ``shared`` verifier
runs in the agent's container and keeps its (no) network; else ``task-default`` gives a fresh
verifier container Harbor's ``public`` network and ``none`` keeps it offline.

The realism profile (``workstation`` or ``off``, docs/sandbox.md) follows the rule as it is:
the task's ``[environment] realism``, else the job's, else the default.
Forking (``sandbox/fork.py``): ``auto`` makes a group's sandboxes copies of one warm
environment when the group has more than one, the engine can fork, and the task has services
or a healthcheck (what takes time to start); ``off``, or anything else, starts each cold.

The runtime: a task that asks for gVisor gets the chosen runtime when that is gVisor, else the
engine's gVisor runtime, else it is refused; a runtime gVisor registered with
``--network=none`` cannot give the network a task needs, and a gVisor sandbox keeps the
interfaces it started with, so a task whose network changes between phases is refused too.
"""

from __future__ import annotations

from envfarm.errors import EnvironmentUnsupported
from envfarm.plan.models import (
    AgentPlan,
    Decision,
    DecisionSource,
    EngineFacts,
    EnvironmentSpec,
    EpisodePlan,
    JobChoices,
    SandboxSpec,
    VerifierPlan,
)
from envfarm.settings import WORKSTATION_USER, Realism, Settings
from envfarm.spec.task import Task

DEFAULT_AGENT_TIMEOUT_S = 1800.0


def environment_spec(task: Task) -> EnvironmentSpec:
    """The task's environment as backends build and start it (the same for every job)."""
    return EnvironmentSpec(
        task_id=task.id,
        task_hash=task.content_hash,
        root=task.root,
        environment_dir=task.environment_dir,
        dockerfile=task.dockerfile,
        compose=task.compose,
        config=task.config.environment,
        main_command=task.main_command,
        main_entrypoint=task.main_entrypoint,
    )


def plan_episode(
    task: Task,
    job: JobChoices | None = None,
    settings: Settings | None = None,
    facts: EngineFacts | None = None,
) -> EpisodePlan:
    """The plan of ``task``'s episodes in a job; EnvironmentUnsupported when the engine, as
    chosen, cannot run the task."""
    job = job or JobChoices()
    settings = settings or Settings()
    facts = facts or EngineFacts()
    config = task.config
    decided: dict[str, Decision] = {}
    agent_network = config.agent_network()
    decided["sandbox.agent_network"] = (
        Decision(source="task", reason="the task's network_mode is public")
        if agent_network
        else Decision(source="default", reason="the agent has no network unless the task asks")
    )
    network, decided["verifier.network"] = _verifier_network(task, job, settings)
    sidecars = job.sidecar_network or settings.sidecar_network
    decided["sandbox.sidecar_network"] = Decision(
        source="job" if job.sidecar_network else "default",
        reason=f"sidecar_network {sidecars}: "
        + ("sidecars reach out as under Harbor" if sidecars == "public" else "sidecars stay in"),
    )
    runtime, decided["sandbox.runtime"] = _runtime(task, job, settings, facts)
    ratio = job.request_ratio or settings.request_ratio
    decided["sandbox.request_ratio"] = Decision(
        source="job" if job.request_ratio else "default",
        reason=f"Kubernetes pods request {ratio:g} of their limits",
    )
    realism, decided["sandbox.realism"] = _realism(task, job, settings)
    fork, decided["sandbox.fork"] = _fork(task, job, settings, facts)
    gvisor = _is_gvisor(runtime, facts)
    if gvisor:
        _check_gvisor(task, runtime or "", facts, network_set=config.verifier_network_set())
    mode = config.verifier.environment_mode
    sandbox = SandboxSpec(
        environment=environment_spec(task),
        runtime=runtime,
        runtime_is_gvisor=gvisor,
        agent_network=agent_network,
        verifier_network=network,
        sidecar_network=sidecars == "public",
        verifier_mode=mode,
        clean_room=settings.clean_room,
        agent_timeout_s=config.agent.timeout_sec or DEFAULT_AGENT_TIMEOUT_S,
        verifier_timeout_s=config.verifier.timeout_sec,
        request_ratio=ratio,
        realism=realism,
        fork=fork,
    )
    budgets = (b for b in (job.context_budget, config.agent.context_budget_tokens) if b)
    agent = AgentPlan(
        max_turns=job.max_turns,
        timeout_s=sandbox.agent_timeout_s,
        command_timeout_s=job.command_timeout_s,
        context_budget=min(budgets, default=None),
        workdir=config.environment.workdir,
        user=config.agent.user or (WORKSTATION_USER if realism == "workstation" else None),
        oracle_user=config.agent.user,
        mcp_servers=config.environment.mcp_servers,
    )
    verifier = VerifierPlan(
        mode=mode,
        network=network,
        agent_network=agent_network,
        clean_room=settings.clean_room,
        reason=f"{_where(mode, settings)}; {decided['verifier.network'].reason}",
        task_id=task.id,
        task_hash=task.content_hash,
        task_root=task.root,
        tests_dir=task.tests_dir,
        instruction=task.instruction,
        workdir=config.environment.workdir,
        env=config.environment.env,
        config=config.verifier,
        artifacts=config.artifacts,
        sidecars=sandbox.environment.sidecars,
    )
    return EpisodePlan(
        task_id=task.id,
        task_hash=task.content_hash,
        sandbox=sandbox,
        agent=agent,
        verifier=verifier,
        decided=decided,
    )


def _fork(
    task: Task, job: JobChoices, settings: Settings, facts: EngineFacts
) -> tuple[bool, Decision]:
    """``auto`` forks a group of more than one from one warm environment when the engine
    can and the task has something that takes time to start (services, a healthcheck)."""
    choice = job.fork or settings.fork
    source: DecisionSource = "job" if job.fork is not None else "default"
    if choice == "off":
        return False, Decision(source=source, reason="fork off: every sandbox starts cold")
    if job.group_size < 2:
        return False, Decision(source=source, reason="fork auto: a group of one starts cold")
    if facts.fork_unsupported is not None:
        reason = f"fork auto, but cold: {facts.fork_unsupported}"
        return False, Decision(source=source, reason=reason)
    if task.compose is None and task.config.environment.healthcheck is None:
        reason = (
            "fork auto, but cold: a single container without services or a healthcheck "
            "starts as quickly as a copy would"
        )
        return False, Decision(source="task", reason=reason)
    reason = f"fork auto: the group's {job.group_size} sandboxes are copies of one warm one"
    return True, Decision(source=source, reason=reason)


def _where(mode: str, settings: Settings) -> str:
    if mode == "shared":
        return "shared: in the agent's container, after the agent"
    fresh = "a fresh container" if settings.clean_room == "fresh" else "a clean room"
    return f"{mode}: in {fresh} that receives {_receives(mode)}"


def _receives(mode: str) -> str:
    return "the agent's changes" if mode == "clean" else "the declared artifacts alone"


def _verifier_network(task: Task, job: JobChoices, settings: Settings) -> tuple[bool, Decision]:
    """The value is ``TaskConfig.verifier_network``'s rule (``spec/config.py``, which lint
    also reads); the plan adds who decided it and why."""
    config = task.config
    choice = job.verifier_network or settings.verifier_network
    network = config.verifier_network(choice)
    if config.verifier_network_set() is not None:
        mode = "public" if network else "no-network"
        return network, Decision(source="task", reason=f"{_net(network)}: network_mode {mode}")
    if config.verifier.environment_mode == "shared":
        reason = "no network: a shared verifier keeps the agent's (none)"
        return network, Decision(source="task", reason=reason)
    source: DecisionSource = "job" if job.verifier_network is not None else "default"
    return network, Decision(source=source, reason=f"{_net(network)}: verifier_network {choice}")


def _net(network: bool) -> str:
    return "network" if network else "no network"


def _realism(task: Task, job: JobChoices, settings: Settings) -> tuple[Realism, Decision]:
    asked = task.config.environment.realism
    if asked is not None:
        return asked, Decision(source="task", reason=f"the task asks for realism {asked!r}")
    source: DecisionSource = "job" if job.realism is not None else "default"
    realism = job.realism or settings.realism
    return realism, Decision(source=source, reason=f"realism {realism!r}")


def _runtime(
    task: Task, job: JobChoices, settings: Settings, facts: EngineFacts
) -> tuple[str | None, Decision]:
    chosen = job.runtime if job.runtime is not None else settings.runtime
    source: DecisionSource = "job" if job.runtime is not None else "default"
    if chosen is not None:
        _known(chosen, facts)
    if task.config.environment.runtime != "gvisor":
        shown = repr(chosen) if chosen else "the engine's default"
        return chosen, Decision(source=source, reason=f"runtime {shown}")
    if _is_gvisor(chosen, facts):
        return chosen, Decision(source="task", reason=f"the task asks for gVisor: {chosen!r}")
    if facts.gvisor_runtime is None:
        raise EnvironmentUnsupported(
            f"task {task.id}: [environment] runtime = 'gvisor', but the {facts.backend} "
            "backend has no gVisor runtime (apt-get install runsc, then register it in "
            "daemon.json as scripts/setup does)"
        )
    gvisor = facts.gvisor_runtime
    return gvisor, Decision(source="task", reason=f"the task asks for gVisor: {gvisor!r}")


def _known(name: str, facts: EngineFacts) -> None:
    if facts.runtimes is not None and name not in facts.runtimes:
        raise EnvironmentUnsupported(
            f"the Docker engine has no runtime {name!r} (registered: "
            f"{', '.join(sorted(facts.runtimes)) or 'none'}); register it in the engine's "
            "daemon.json (scripts/setup registers gVisor as 'runsc') or pick another"
        )


def _is_gvisor(name: str | None, facts: EngineFacts) -> bool:
    if name is None:
        return False
    if facts.runtimes is not None:
        return name in facts.runtimes and facts.runtimes[name].gvisor
    return name == facts.gvisor_runtime


def _check_gvisor(task: Task, name: str, facts: EngineFacts, *, network_set: bool | None) -> None:
    """Refuse what a gVisor runtime cannot give: Harbor's default network for an unset
    verifier is not a need, so only what the task asks for counts."""
    info = facts.runtimes.get(name) if facts.runtimes is not None else None
    modes = (("agent", task.config.agent_network()), ("verifier", network_set is True))
    phases = [phase for phase, public in modes if public]
    sidecars = sorted(task.compose.sidecars) if task.compose is not None else []
    where = f"task {task.id}: runtime {name!r} (gVisor)"
    if info is not None and not info.networked and (phases or sidecars):
        needs = (
            f"network_mode 'public' in the {' and '.join(phases)} phase{'s' * (len(phases) > 1)}"
            if phases
            else f"its services ({', '.join(sidecars)}) on the environment network"
        )
        raise EnvironmentUnsupported(
            f"{where} is registered with --network=none, so its containers have no network "
            f"but loopback, and the task needs {needs}; run it without gVisor, or register "
            "another gVisor runtime without --network=none"
        )
    if len(phases) == 1:
        raise EnvironmentUnsupported(
            f"{where}: the network changes between the agent and the verifier phase, and a "
            "gVisor sandbox keeps the interfaces it started with; give both phases the same "
            "network_mode, or run the task without gVisor"
        )
