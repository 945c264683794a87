"""The EnvPool operator against the in-memory API with a simulated kubelet: it holds the replica
count through deletions, scales when patched, hands each pod to one claimer only, cascades
deletion, and survives watches that expire."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from envfarm.k8s.api import ENV_POOLS, PODS, KubeObject
from envfarm.k8s.pools import CLAIMED_LABEL, POOL_LABEL, NoWarmEnvironment, claim, pod_ready
from envfarm.operator.envpool import EnvPoolReconciler
from envfarm.operator.poolcache import PoolPods
from envfarm.operator.workqueue import Operator, envpool_controller
from envfarm.sandbox.kubernetes.backend import KubernetesBackend, KubernetesBackendConfig
from envfarm.sandbox.kubernetes.pooltemplate import TaskTemplates
from envfarm.sandbox.kubernetes.sandbox import KubernetesSandbox
from envfarm.spec.task import load_task
from envfarm.testing.k8s.fakeruntime import FakePodRuntime
from envfarm.testing.k8s.kubelet import SimulatedKubelet
from envfarm.testing.k8s.memory import MemoryKubeApi
from tests.plans import sandbox_spec
from tests.waiting import until

TASKS = Path(__file__).resolve().parents[2] / "tasks"
NS = "envfarm-sandboxes"


class Farm:
    def __init__(self, cached: bool = False) -> None:
        self.api = MemoryKubeApi()
        self.kubelet = SimulatedKubelet(self.api, runtime=FakePodRuntime(), probe_period_s=0.01)
        task = load_task(TASKS / "pg-schema-migration")
        self.task_id = task.id
        pods = PoolPods(self.api, NS) if cached else None
        self.reconciler = EnvPoolReconciler(
            self.api, TaskTemplates({task.id: sandbox_spec(task)}), pods
        )
        self.operator = Operator(self.api, NS, workers=4, retry_delay_s=0.01, resync_s=None)
        self.operator.add(envpool_controller(self.reconciler))

    async def __aenter__(self) -> Farm:
        await self.operator.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.operator.stop()
        await self.api.close()

    async def pool(
        self, name: str, replicas: int, task: str | None = None, **spec: Any
    ) -> KubeObject:
        body = {
            "metadata": {"name": name},
            "spec": {"taskRef": {"name": task or self.task_id}, "replicas": replicas, **spec},
        }
        return await self.api.create(ENV_POOLS, NS, body)

    def members(self, pool: str) -> list[KubeObject]:
        return [
            p
            for p in self.api.objects(PODS)
            if (p["metadata"].get("labels") or {}).get(POOL_LABEL) == pool
        ]

    def settled(self, pool: str, replicas: int) -> bool:
        members = self.members(pool)
        current = self.api.objects(ENV_POOLS)
        status = next((p.get("status") or {} for p in current if p["metadata"]["name"] == pool), {})
        return (
            len(members) == replicas
            and all(pod_ready(p) for p in members)
            and status.get("readyReplicas") == replicas
            and status.get("replicas") == replicas
        )


@pytest.mark.parametrize("cached", [False, True], ids=["listing", "watch-cache"])
async def test_the_pool_holds_its_replicas_through_deletions_and_scales_when_patched(
    cached: bool,
) -> None:
    async with Farm(cached) as farm:
        await farm.pool("warm", 3)
        await until(lambda: farm.settled("warm", 3))
        status = (await farm.api.get(ENV_POOLS, NS, "warm"))["status"]
        assert status["selector"] == f"{POOL_LABEL}=warm"
        assert [c["type"] for c in status["conditions"]] == ["Ready"]
        assert status["conditions"][0]["status"] == "True"
        first = {p["metadata"]["name"] for p in farm.members("warm")}
        victim = sorted(first)[0]
        await farm.api.delete(PODS, NS, victim)
        await until(lambda: farm.settled("warm", 3) and victim not in _names(farm, "warm"))
        await farm.api.patch(ENV_POOLS, NS, "warm", {"spec": {"replicas": 5}}, subresource="scale")
        await until(lambda: farm.settled("warm", 5))
        scale = await farm.api.get(ENV_POOLS, NS, "warm", subresource="scale")
        assert scale["status"] == {"replicas": 5, "selector": f"{POOL_LABEL}=warm"}
        await farm.api.patch(ENV_POOLS, NS, "warm", {"spec": {"replicas": 2}})
        await until(lambda: farm.settled("warm", 2) and len(farm.api.objects(PODS)) == 2)
        pod = farm.members("warm")[0]
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "EnvPool"
        names = {c["name"] for c in pod["spec"]["containers"]}
        assert names == {"main", "db"}


def _names(farm: Farm, pool: str) -> set[str]:
    return {p["metadata"]["name"] for p in farm.members(pool)}


@pytest.mark.parametrize("cached", [False, True], ids=["listing", "watch-cache"])
async def test_claims_are_exclusive_under_concurrency_and_the_pool_refills(cached: bool) -> None:
    async with Farm(cached) as farm:
        await farm.pool("warm", 8)
        await until(lambda: farm.settled("warm", 8))
        await farm.operator.stop()  # no refill while the claimers race

        async def attempt(index: int) -> str | None:
            try:
                pod = await claim(farm.api, NS, "warm", f"worker-{index}")
            except NoWarmEnvironment:
                return None
            name: str = pod["metadata"]["name"]
            return name

        results = await asyncio.gather(*(attempt(i) for i in range(30)))
        won = [name for name in results if name is not None]
        assert len(won) == 8
        assert len(set(won)) == 8
        for index, name in enumerate(results):
            if name is not None:
                pod = await farm.api.get(PODS, NS, name)
                assert pod["metadata"]["labels"][CLAIMED_LABEL] == f"worker-{index}"
                assert POOL_LABEL not in pod["metadata"]["labels"]
                assert "ownerReferences" not in pod["metadata"]
        await farm.operator.start()
        await until(lambda: farm.settled("warm", 8))
        assert len(farm.api.objects(PODS)) == 16


async def test_deleting_the_pool_removes_its_pods_and_leaves_nothing() -> None:
    async with Farm() as farm:
        await farm.pool("doomed", 4)
        await until(lambda: farm.settled("doomed", 4))
        await farm.api.delete(ENV_POOLS, NS, "doomed", propagation="Foreground")
        await until(lambda: farm.api.all_keys() == [])


@pytest.mark.parametrize("cached", [False, True], ids=["listing", "watch-cache"])
async def test_an_expired_watch_lists_again_and_sees_what_it_missed(cached: bool) -> None:
    async with Farm(cached) as farm:
        await farm.pool("warm", 2)
        await until(lambda: farm.settled("warm", 2))
        lists = [informer.lists for informer in farm.operator.informers]
        victim = farm.members("warm")[0]
        # Without yielding to the loop: watches end, a pod vanishes unseen, history is forgotten.
        farm.api.close_watches()
        gone = farm.api.lookup(PODS, NS, victim["metadata"]["name"])
        farm.api.delete_now(PODS, gone, "Background")
        farm.api.compact_history()
        await until(lambda: farm.settled("warm", 2))
        assert victim["metadata"]["name"] not in _names(farm, "warm")
        assert [informer.lists for informer in farm.operator.informers] == [n + 1 for n in lists]


async def test_an_unknown_task_is_a_permanent_condition_not_a_retry_loop() -> None:
    async with Farm() as farm:
        await farm.pool("broken", 2, task="no-such-task")

        def failed() -> bool:
            [pool] = farm.api.objects(ENV_POOLS)
            conditions = (pool.get("status") or {}).get("conditions") or []
            return any(c["reason"] == "TaskSpecError" for c in conditions)

        await until(failed)
        [pool] = farm.api.objects(ENV_POOLS)
        [condition] = pool["status"]["conditions"]
        assert condition["status"] == "False"
        assert "no task 'no-such-task'" in condition["message"]
        assert farm.operator.failures == {}
        assert farm.api.objects(PODS) == []


@pytest.mark.parametrize(("strategy", "replaced"), [("Recreate", True), ("OnReplenish", False)])
async def test_update_strategy_on_a_template_change(strategy: str, replaced: bool) -> None:
    async with Farm() as farm:
        await farm.pool("warm", 2, updateStrategy={"type": strategy})
        await until(lambda: farm.settled("warm", 2))
        before = _names(farm, "warm")
        await farm.api.patch(ENV_POOLS, NS, "warm", {"spec": {"runtimeClassName": "gvisor"}})
        if replaced:
            await until(lambda: farm.settled("warm", 2) and not (_names(farm, "warm") & before))
            assert all(p["spec"]["runtimeClassName"] == "gvisor" for p in farm.members("warm"))
        else:
            await until(lambda: farm.operator.queue.idle())
            assert _names(farm, "warm") == before


async def test_the_sandbox_backend_claims_warm_environments_and_starts_cold_without_one() -> None:
    async with Farm(cached=True) as farm:
        await farm.pool("warm", 1)
        await until(lambda: farm.settled("warm", 1))
        task = load_task(TASKS / "pg-schema-migration")
        verifier = task.config.verifier.model_copy(update={"environment_mode": "shared"})
        task = dataclasses.replace(
            task, config=task.config.model_copy(update={"verifier": verifier})
        )
        config = KubernetesBackendConfig(namespace=NS, pools={task.id: "warm"})
        backend = KubernetesBackend(farm.api, config)
        image = await backend.prepare(sandbox_spec(task))
        warm, cold = (backend.create(sandbox_spec(task), image, run_id="run-9") for _ in range(2))
        await warm.start()
        await cold.start()  # the pool's only pod is taken: a cold start
        assert isinstance(warm, KubernetesSandbox)
        assert isinstance(cold, KubernetesSandbox)
        assert (warm.launch, cold.launch) == ("warm", "cold")
        claimed = await farm.api.get(PODS, NS, warm.name)
        assert claimed["metadata"]["labels"][CLAIMED_LABEL]
        assert claimed["metadata"]["labels"]["envfarm.dev/run"] == "run-9"
        assert (await warm.exec("true")).exit_code == 0
        await until(lambda: farm.settled("warm", 1))  # the pool refilled
        await warm.stop()
        await cold.stop()
        assert {p["metadata"]["name"] for p in farm.api.objects(PODS)} == _names(farm, "warm")
        await backend.close()
