"""A worker process for chaos runs: ``envfarm worker``'s controller over a split backend.

``python -m envfarm.testing.chaos_worker --db URL --tasks DIR --data-dir DIR`` opens the same
controller as ``envfarm worker`` (``open_controller`` with a ``WorkerConfig``: leases,
heartbeats, retries, host admission, grading), with one difference: tasks whose id starts
with ``DOCKER_PREFIX`` run in real Docker containers and every other task in a fake sandbox
that grades itself: its ``tests/test.sh`` writes reward 1 when the agent ran ``ANSWER`` and 0
otherwise. So a chaos run spends real containers only where killing them is the point.
SIGTERM or SIGINT stops it as they stop ``envfarm worker``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path

from envfarm.controller.service import open_controller
from envfarm.controller.worker import WorkerConfig
from envfarm.plan.models import EngineFacts, SandboxSpec
from envfarm.sandbox.base import ExecResult, PreparedImage, Sandbox, SandboxBackend
from envfarm.spec.task import discover_tasks
from envfarm.testing.fake_sandbox import FakeBackend, FakeSandbox, ok

DOCKER_PREFIX = "chaos/docker-"
ANSWER = "echo 42 > /app/answer.txt"


class SelfGradingFakeBackend(FakeBackend):
    """Fake sandboxes whose test script rewards ``ANSWER``, each judged on its own commands."""

    def create(self, spec: SandboxSpec, image: PreparedImage, *, run_id: str) -> Sandbox:
        sandbox = super().create(spec, image, run_id=run_id)
        assert isinstance(sandbox, FakeSandbox)

        def handler(command: str) -> ExecResult:
            if "/tests/test.sh" in command:
                solved = any(ANSWER in c for c in sandbox.commands)
                sandbox.files["/logs/verifier/reward.txt"] = b"1\n" if solved else b"0\n"
            return ok()

        sandbox.handler = handler
        return sandbox


class SplitBackend(SandboxBackend):
    """Docker for tasks named ``DOCKER_PREFIX...``, the self-grading fake for the others."""

    name = "chaos"

    def __init__(self, docker: SandboxBackend, fake: SandboxBackend) -> None:
        self.docker, self.fake = docker, fake

    def _for(self, spec: SandboxSpec) -> SandboxBackend:
        return self.docker if spec.task_id.startswith(DOCKER_PREFIX) else self.fake

    async def facts(self) -> EngineFacts:
        return await self.docker.facts()

    async def prepare(self, spec: SandboxSpec) -> PreparedImage:
        return await self._for(spec).prepare(spec)

    def create(self, spec: SandboxSpec, image: PreparedImage, *, run_id: str) -> Sandbox:
        return self._for(spec).create(spec, image, run_id=run_id)

    async def reap(self) -> list[str]:
        return await self.docker.reap()


async def work(args: argparse.Namespace) -> None:
    from envfarm.sandbox.docker.backend import DockerBackend

    tasks, errors = discover_tasks([args.tasks])
    if errors:
        raise SystemExit(f"bad tasks: {errors}")
    backend = SplitBackend(DockerBackend(), SelfGradingFakeBackend(latency_s=args.exec_latency_s))
    config = WorkerConfig(concurrency=args.concurrency, lease_s=args.lease_s, poll_s=0.2)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    async with open_controller(
        args.db,
        {task.id: task for task in tasks},
        backend=backend,
        worker=config,
        artifacts_root=args.data_dir / "artifacts",
    ):
        print(f"envfarm: worker on the store ({len(tasks)} tasks, {args.concurrency} at once)",
              flush=True)  # fmt: skip
        await stopping.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--tasks", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--concurrency", type=int, default=3)
    parser.add_argument("--lease-s", type=float, default=30.0)
    parser.add_argument("--exec-latency-s", type=float, default=0.2)
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    asyncio.run(work(args))


if __name__ == "__main__":
    main()
