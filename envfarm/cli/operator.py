"""``envfarm operator``: reconcile RolloutJobs and EnvPools of one namespace on a real cluster.

It reaches the API server with the kubeconfig (``--kubeconfig``, ``$KUBECONFIG``,
``~/.kube/config``) or, inside a pod, with its service account (``--in-cluster``, the default
when ``KUBERNETES_SERVICE_HOST`` is set), and the controller API at ``--api`` with the bearer
token ``ENVFARM_TOKEN``. RolloutJobs become jobs in that API; EnvPools render their pods from
the task library at ``--tasks``. One replica runs at a time (the Deployment's ``Recreate``
strategy); there is no leader election yet.
"""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
import tempfile
from pathlib import Path

import click
from rich.markup import escape

from envfarm.cli.options import command_settings
from envfarm.cli.render import console
from envfarm.cli.serve import _load_tasks, _run
from envfarm.client import EnvfarmClient
from envfarm.errors import EnvfarmError
from envfarm.operator.envpool import EnvPoolReconciler
from envfarm.operator.poolcache import PoolPods
from envfarm.operator.rolloutjob import InvalidRolloutJob, RolloutJobReconciler
from envfarm.operator.workqueue import Operator, envpool_controller, rolloutjob_controller
from envfarm.plan.models import EngineFacts, SandboxSpec
from envfarm.plan.planner import plan_episode
from envfarm.sandbox.kubernetes.podimages import ImageNaming
from envfarm.sandbox.kubernetes.podspec import GVISOR_RUNTIME_CLASS
from envfarm.sandbox.kubernetes.pooltemplate import TaskTemplates
from envfarm.spec.task import Task, discover_tasks

MAX_ARCHIVE_BYTES = 64 * 1024 * 1024
DEFAULT_NAMESPACE = "envfarm-sandboxes"


def tasks_in_archive(data: bytes) -> dict[str, str]:
    """A (gzipped) tar of task directories -> ``{task id: content hash}``."""
    with tempfile.TemporaryDirectory(prefix="envfarm-archive-") as folder:
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
                size = sum(member.size for member in archive.getmembers())
                if size > MAX_ARCHIVE_BYTES:
                    raise InvalidRolloutJob(
                        f"task archive unpacks to {size} bytes (at most {MAX_ARCHIVE_BYTES})"
                    )
                archive.extractall(folder, filter="data")
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise InvalidRolloutJob(f"task archive: not a readable tar: {exc}") from exc
        tasks, errors = discover_tasks([Path(folder)])
        if errors:
            detail = str(errors[0]).replace(folder, "archive:")
            raise InvalidRolloutJob(f"task archive: {len(errors)} bad task(s); first: {detail}")
        return {task.id: task.content_hash for task in tasks}


@click.command()
@click.option("--namespace", envvar="ENVFARM_SANDBOX_NAMESPACE", default=DEFAULT_NAMESPACE,
              show_default=True,
              help="Namespace of the RolloutJobs, EnvPools and environment pods "
              "(or ENVFARM_SANDBOX_NAMESPACE).")  # fmt: skip
@click.option("--api", "api_url", envvar="ENVFARM_API_URL", required=True, metavar="URL",
              help="Controller API to submit RolloutJobs to (or ENVFARM_API_URL).")  # fmt: skip
@click.option("--token", envvar="ENVFARM_TOKEN", default=None,
              help="The API's bearer token (or ENVFARM_TOKEN).")  # fmt: skip
@click.option("--kubeconfig", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Kubeconfig file [default: $KUBECONFIG, then ~/.kube/config].")  # fmt: skip
@click.option("--context", default=None, help="Kubeconfig context [default: its current one].")
@click.option("--in-cluster/--no-in-cluster", default=None,
              help="Use the pod's service account [default: when KUBERNETES_SERVICE_HOST "
              "is set].")  # fmt: skip
@click.option("--tasks", "tasks_dir", type=click.Path(path_type=Path), default=None,
              envvar="ENVFARM_TASKS",
              help="Task library EnvPools render their pods from (or ENVFARM_TASKS); "
              "without it, every EnvPool reports its task unknown.")  # fmt: skip
@click.option("--workers", type=click.IntRange(min=1), default=8, show_default=True,
              help="Objects reconciled at once.")  # fmt: skip
@click.option("--poll", "poll_s", type=click.FloatRange(min=0.1), default=5.0,
              show_default=True,
              help="Seconds between two reads of a running job's state.")  # fmt: skip
def operator(
    namespace: str,
    api_url: str,
    token: str | None,
    kubeconfig: Path | None,
    context: str | None,
    in_cluster: bool | None,
    tasks_dir: Path | None,
    workers: int,
    poll_s: float,
) -> None:
    """Run the operator: RolloutJobs -> jobs in the API, EnvPools -> warm environments."""
    tasks: dict[str, Task] = _load_tasks(tasks_dir) if tasks_dir is not None else {}
    if in_cluster is None:
        in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))

    async def main(stopping: asyncio.Event) -> None:
        from envfarm.k8s.kubeconfig import in_cluster_config, load_kubeconfig
        from envfarm.k8s.rest import RestKubeApi

        config = in_cluster_config() if in_cluster else await load_kubeconfig(kubeconfig, context)
        kube = RestKubeApi(config)
        async with EnvfarmClient(api_url, token, retry_for_s=30.0) as client:
            reconcilers = Operator(kube, namespace, workers=workers)
            naming = ImageNaming(registry=command_settings().image_registry)
            templates = TaskTemplates(_pool_specs(tasks), naming)
            pool_pods = PoolPods(kube, namespace)  # the pods' watch, not a list per pass
            reconcilers.add(envpool_controller(EnvPoolReconciler(kube, templates, pool_pods)))
            jobs = RolloutJobReconciler(
                kube, client, api_url, archive_tasks=tasks_in_archive, poll_s=poll_s
            )
            reconcilers.add(rolloutjob_controller(jobs))
            await reconcilers.start()
            console.print(
                f"envfarm: operator on {escape(config.server)} namespace {escape(namespace)}, "
                f"API {escape(api_url)} ({len(tasks)} tasks for EnvPools)",
                soft_wrap=True,
            )
            try:
                await stopping.wait()
            finally:
                await reconcilers.stop()
                await kube.close()

    _run(main)


def _pool_specs(tasks: dict[str, Task]) -> dict[str, SandboxSpec]:
    """Each task's sandbox as an EnvPool renders it: its plan on a cluster whose gVisor
    RuntimeClass is manifests/' (a task the plan refuses is left out, with a line)."""
    facts = EngineFacts(backend="Kubernetes cluster", gvisor_runtime=GVISOR_RUNTIME_CLASS)
    specs = {}
    for task_id, task in tasks.items():
        try:
            specs[task_id] = plan_episode(task, facts=facts).sandbox
        except EnvfarmError as exc:
            console.print(f"[yellow]task {escape(task_id)} not served to EnvPools:[/] {exc}")
    return specs
