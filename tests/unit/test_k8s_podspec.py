"""The environment pod of a task does what the Docker backend does with the same task.

The Docker side is read from the Docker backend's own pure configuration functions (no engine
is needed): the main container's configuration, the sidecars' environment, healthchecks,
capabilities, limits, network aliases, volumes and copied files.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import io
import shlex
import tarfile
from pathlib import Path
from typing import Any

import pytest

from envfarm.errors import TaskSpecError
from envfarm.k8s.api import KubeObject
from envfarm.plan.models import JobChoices, SandboxSpec
from envfarm.plan.planner import environment_spec, plan_episode
from envfarm.sandbox.docker import services as docker_services
from envfarm.sandbox.docker.sandbox import DockerSandboxConfig
from envfarm.sandbox.hardening import DEFAULT_CAPS, SIDECAR_CPUS, SIDECAR_MEMORY_MB
from envfarm.sandbox.kubernetes.backend import KubernetesBackend
from envfarm.sandbox.kubernetes.podimages import ImageNaming, cluster_images
from envfarm.sandbox.kubernetes.podspec import (
    LABEL_ENVIRONMENT,
    LABEL_NETWORK,
    LABEL_RUN,
    LABEL_TASK,
    PodOptions,
    environment_pod,
)
from envfarm.sandbox.kubernetes.pooltemplate import TaskTemplates
from envfarm.settings import Settings
from envfarm.spec.compose import ComposeSpec
from envfarm.spec.task import Task, load_task
from envfarm.testing.k8s.memory import MemoryKubeApi
from tests.plans import sandbox_spec

TASKS = Path(__file__).resolve().parents[2] / "tasks"


@pytest.fixture(scope="module")
def pg_task() -> Task:
    return load_task(TASKS / "pg-schema-migration")


def _docker_main(task: Task) -> DockerSandboxConfig:
    """What ``DockerBackend.create`` then ``DockerEnvironment`` configure for the main one."""
    env = task.config.environment
    base = DockerSandboxConfig(
        image="task-image",
        network=task.config.agent_network(),
        cpus=env.cpus,
        memory_mb=env.memory_mb,
        workdir=env.workdir,
        env=env.env,
        run_id="run-1",
        task_id=task.id,
    )
    return docker_services.main_config(environment_spec(task), base, "env1")


def _pod(task: Task, **options: Any) -> KubeObject:
    return environment_pod(
        sandbox_spec(task),
        cluster_images(environment_spec(task)),
        PodOptions(environment_id="env1", run_id="run-1", **options),
    )


def compose(task: Task) -> ComposeSpec:
    assert task.compose is not None, f"{task.id} has services"
    return task.compose


def member_bytes(archive: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    extracted = archive.extractfile(member)
    return b"" if extracted is None else extracted.read()


def _containers(pod: KubeObject) -> dict[str, KubeObject]:
    return {c["name"]: c for c in pod["spec"]["containers"]}


def _env(container: KubeObject) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container["env"]}


def test_environment_variables_match_the_docker_backend(pg_task: Task) -> None:
    containers = _containers(_pod(pg_task))
    assert _env(containers["main"]) == _docker_main(pg_task).env
    assert _env(containers["main"])["PGHOST"] == "db"
    assert _env(containers["db"]) == compose(pg_task).services["db"].environment
    assert containers["main"]["workingDir"] == _docker_main(pg_task).workdir


def test_healthchecks_become_readiness_probes(pg_task: Task) -> None:
    db = _containers(_pod(pg_task))["db"]
    check = compose(pg_task).services["db"].healthcheck
    assert check is not None
    probe = db["readinessProbe"]
    assert probe["exec"]["command"] == compose(pg_task).services["db"].health_argv()
    assert probe["exec"]["command"] == ["/bin/sh", "-c", "pg_isready -U app -d shop"]
    assert (probe["periodSeconds"], probe["timeoutSeconds"]) == (check.interval, check.timeout)
    assert probe["failureThreshold"] == check.retries
    assert "readinessProbe" not in _containers(_pod(pg_task))["main"]


def test_redis_command_and_cmd_healthcheck() -> None:
    task = load_task(TASKS / "redis-rate-limiter")
    cache = _containers(_pod(task))["cache"]
    service = compose(task).services["cache"]
    assert cache["args"] == service.command == ["redis-server", "--save", "", "--appendonly", "no"]
    assert "command" not in cache
    assert cache["readinessProbe"]["exec"]["command"] == ["redis-cli", "ping"]
    assert _env(_containers(_pod(task))["main"])["REDIS_URL"] == "redis://cache:6379/0"


def test_hardening_and_limits_match(pg_task: Task) -> None:
    pod = _pod(pg_task)
    main, db = _containers(pod)["main"], _containers(pod)["db"]
    docker = _docker_main(pg_task)
    assert main["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": docker.cap_add}
    assert db["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": DEFAULT_CAPS}
    for container in (*pod["spec"]["initContainers"], main, db):
        assert (
            container["securityContext"]["allowPrivilegeEscalation"] is False
        )  # no-new-privileges
    assert main["resources"]["limits"]["memory"] == f"{docker.memory_mb}Mi"
    assert main["resources"]["limits"]["cpu"] == f"{round(docker.cpus * 1000)}m"
    storage = pg_task.config.environment.storage_mb
    assert main["resources"]["limits"]["ephemeral-storage"] == f"{storage}Mi"
    assert db["resources"]["limits"] == {
        "cpu": f"{round(SIDECAR_CPUS * 1000)}m",
        "memory": f"{SIDECAR_MEMORY_MB}Mi",
    }
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["restartPolicy"] == "Never"


def test_pods_request_half_their_limits_unless_the_job_or_the_pool_says_otherwise(
    pg_task: Task,
) -> None:
    main = _containers(_pod(pg_task))["main"]
    limits, requests = main["resources"]["limits"], main["resources"]["requests"]
    docker = _docker_main(pg_task)
    assert requests["memory"] == f"{docker.memory_mb // 2}Mi"
    assert requests["cpu"] == f"{round(docker.cpus * 500)}m"
    storage = pg_task.config.environment.storage_mb
    assert (limits["ephemeral-storage"], requests["ephemeral-storage"]) == (
        f"{storage}Mi",
        f"{storage // 2}Mi",
    )
    db = _containers(_pod(pg_task))["db"]
    assert db["resources"]["requests"]["memory"] == f"{SIDECAR_MEMORY_MB // 2}Mi"
    whole = plan_episode(pg_task, JobChoices(request_ratio=1.0)).sandbox
    assert whole.request_ratio == 1.0
    pod = environment_pod(whole, cluster_images(whole.environment), PodOptions(environment_id="e"))
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["requests"]["memory"] == resources["limits"]["memory"]
    pool = {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"taskRef": {"name": pg_task.id}, "requestRatio": 0.25},
    }
    template = asyncio.run(TaskTemplates({pg_task.id: sandbox_spec(pg_task)})(pool))
    pooled = template["spec"]["containers"][0]["resources"]
    assert pooled["requests"]["memory"] == f"{docker.memory_mb // 4}Mi"


def test_network_rules_match(pg_task: Task) -> None:
    pod = _pod(pg_task)
    docker = _docker_main(pg_task)
    docker_names = set(docker.network_aliases) | set(compose(pg_task).sidecars)
    aliases = pod["spec"]["hostAliases"]
    assert aliases == [{"ip": "127.0.0.1", "hostnames": sorted(docker_names)}]
    assert docker.network is False
    assert pod["metadata"]["labels"][LABEL_NETWORK] == "none"
    assert pod["spec"]["dnsPolicy"] == "None"
    assert pod["spec"]["dnsConfig"]["nameservers"] == ["127.0.0.1"]


def test_volumes_and_copied_files_match(pg_task: Task) -> None:
    pod = _pod(pg_task)
    db_service = compose(pg_task).services["db"]
    names = docker_services.volume_names("env1", compose(pg_task).volumes, db_service)
    docker_binds = docker_services.volume_binds(db_service.volumes, names)
    mounts = _containers(pod)["db"]["volumeMounts"]
    volume_targets = [m["mountPath"] for m in mounts if m["name"].startswith("vol-")]
    assert volume_targets == [bind.split(":")[1] for bind in docker_binds]
    bind_mounts = {m["mountPath"]: m for m in mounts if m["name"] == "envfarm-binds"}
    docker_archive = docker_services.files_archive(pg_task.environment_dir, db_service.volumes)
    assert docker_archive is not None
    with tarfile.open(fileobj=io.BytesIO(docker_archive)) as archive:
        docker_files = {
            "/" + m.name: (member_bytes(archive, m), m.mode) for m in archive if m.isfile()
        }
    unpack = pod["spec"]["initContainers"][1]
    encoded = unpack["env"][0]["value"]
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(base64.b64decode(encoded)))) as archive:
        ours = {m.name: (member_bytes(archive, m), m.mode, m.uid) for m in archive}
    assert set(bind_mounts) == set(docker_files)
    for target, (content, mode) in docker_files.items():
        copied = ours[bind_mounts[target]["subPath"]]
        assert copied == (content, mode, 0)
        assert bind_mounts[target]["readOnly"] is True


def test_labels_owner_ttl_runtime_and_images(pg_task: Task) -> None:
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u1"}
    pod = _pod(pg_task, runtime_class="gvisor", ttl_seconds=900, owner=owner)
    labels = pod["metadata"]["labels"]
    assert labels[LABEL_ENVIRONMENT] == "env1"
    assert labels[LABEL_RUN] == "run-1"
    assert labels[LABEL_TASK].startswith("envfarm-pg-schema-migration-")
    assert pod["metadata"]["annotations"]["envfarm.dev/task-id"] == pg_task.id
    assert pod["metadata"]["ownerReferences"] == [owner]
    assert pod["spec"]["runtimeClassName"] == "gvisor"
    assert pod["spec"]["activeDeadlineSeconds"] == 900
    images = cluster_images(
        environment_spec(pg_task), ImageNaming(registry="registry.example/team")
    )
    assert images.services["db"] == "registry.example/team/envfarm/postgres:bookworm"
    assert images.main.startswith("registry.example/team/envfarm-task/")


def test_main_runs_the_helper_with_stdin_open(pg_task: Task) -> None:
    main = _containers(_pod(pg_task))["main"]
    assert main["command"] == ["/.envfarm/sandboxd"]
    assert (main["stdin"], main["stdinOnce"], main["tty"]) == (True, False, False)


def test_non_root_main_drops_every_capability(pg_task: Task) -> None:
    main = _containers(_pod(pg_task, run_as_user=1000))["main"]
    context = main["securityContext"]
    assert (context["runAsUser"], context["runAsNonRoot"]) == (1000, True)
    assert context["capabilities"] == {"drop": ["ALL"]}


def _compose_task(tmp_path: Path, compose: str, toml: str = "") -> Task:
    root = tmp_path / "task"
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "task.toml").write_text('schema_version = "1.4"\n' + toml)
    (root / "instruction.md").write_text("Do it.\n")
    (root / "tests" / "test.sh").write_text("#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n")
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "environment" / "docker-compose.yaml").write_text(compose)
    return load_task(root)


def test_a_named_sidecar_user_is_a_clear_error(tmp_path: Path) -> None:
    task = _compose_task(tmp_path, "services:\n  cache:\n    image: redis:7\n    user: redis\n")
    with pytest.raises(TaskSpecError, match=r"services.cache.user.*numeric"):
        _pod(task)


def test_numeric_sidecar_user_and_internet_tasks(tmp_path: Path) -> None:
    compose = "services:\n  cache:\n    image: redis:7\n    user: '999:998'\n"
    task = _compose_task(tmp_path, compose, '[environment]\nnetwork_mode = "public"\n')
    pod = _pod(task)
    context = _containers(pod)["cache"]["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"], context["runAsNonRoot"]) == (
        999,
        998,
        True,
    )
    assert pod["metadata"]["labels"][LABEL_NETWORK] == "internet"
    assert "dnsPolicy" not in pod["spec"]


def test_main_healthcheck_runs_like_the_helper_runs_it(tmp_path: Path) -> None:
    toml = '[environment.healthcheck]\ncommand = "test -f /ready"\nretries = 4\n'
    task = _compose_task(tmp_path, "services:\n  main: {}\n", toml)
    probe = _containers(_pod(task))["main"]["readinessProbe"]
    assert probe["failureThreshold"] == 4
    script = probe["exec"]["command"][2]
    assert shlex.quote("test -f /ready") in script
    assert "/bin/bash" in script


def test_a_task_asking_for_gvisor_gets_the_gvisor_runtime_class(
    tmp_path: Path, pg_task: Task
) -> None:
    task = _compose_task(tmp_path, "services:\n  main: {}\n", '[environment]\nruntime = "gvisor"\n')
    backend = KubernetesBackend(MemoryKubeApi())
    facts = asyncio.run(backend.facts())

    def planned(task: Task, runtime: str | None = None) -> SandboxSpec:
        return plan_episode(task, settings=Settings(runtime=runtime), facts=facts).sandbox

    assert backend.pod_options(planned(task), "r").runtime_class == "gvisor"
    assert backend.pod_options(planned(task, "kata"), "r").runtime_class == "gvisor"
    assert backend.pod_options(planned(pg_task), "r").runtime_class is None
    assert backend.pod_options(planned(pg_task, "kata"), "r").runtime_class == "kata"
    pool = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"taskRef": {"name": task.id}}}
    template = asyncio.run(TaskTemplates({task.id: planned(task)})(pool))
    assert template["spec"]["runtimeClassName"] == "gvisor"


def test_a_pools_node_selector_and_tolerations_place_its_pods(pg_task: Task) -> None:
    templates = TaskTemplates({pg_task.id: sandbox_spec(pg_task)})
    spec: dict[str, Any] = {"taskRef": {"name": pg_task.id}}
    pool = {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}
    plain = asyncio.run(templates(pool))["spec"]
    assert "nodeSelector" not in plain
    assert "tolerations" not in plain
    toleration = {"key": "pool", "operator": "Equal", "value": "envs", "effect": "NoSchedule"}
    spec.update(nodeSelector={"pool": "envs"}, tolerations=[toleration])
    placed = asyncio.run(templates(pool))["spec"]
    assert placed["nodeSelector"] == {"pool": "envs"}
    assert placed["tolerations"] == [toleration]
    assert {k: v for k, v in placed.items() if k not in ("nodeSelector", "tolerations")} == plain
