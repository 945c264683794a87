"""Watches on a real API server: one from a version the server no longer holds ends with 410,
which envfarm's client raises as ``KubeGone`` (whether the server answers with an HTTP status
or an ERROR event in the stream), and an informer then lists again and keeps up."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from envfarm.errors import KubeGone
from envfarm.k8s.api import CONFIG_MAPS
from envfarm.k8s.informer import Informer
from envfarm.k8s.kubeconfig import load_kubeconfig
from envfarm.k8s.rest import RestKubeApi
from tests.k8s.cluster import Cluster
from tests.k8s.pods import namespace
from tests.waiting import until

__all__ = ["namespace"]  # fixtures

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_a_watch_from_an_expired_version_is_gone(cluster: Cluster, namespace: str) -> None:
    api = RestKubeApi(await load_kubeconfig(Path(cluster.kubeconfig)))

    seen: list[str] = []

    async def watch_from_the_start() -> None:
        async with asyncio.timeout(60):
            async for event in api.watch(CONFIG_MAPS, namespace, resource_version="1"):
                seen.append(f"{event.type} {event.object.get('metadata', {}).get('name')}")

    try:
        with pytest.raises(KubeGone):
            await watch_from_the_start()
    except TimeoutError:
        said = cluster.log_tail("kube-apiserver")
        raise AssertionError(f"no 410 in 60 s; events {seen[:20]}; API server:\n{said}") from None
    finally:
        await api.close()


async def test_an_informer_sees_changes_made_while_it_lists_and_watches(
    cluster: Cluster, namespace: str
) -> None:
    api = RestKubeApi(await load_kubeconfig(Path(cluster.kubeconfig)))
    informer = Informer(api, CONFIG_MAPS, namespace)
    informer.start()
    try:
        await until(informer.synced.is_set, timeout_s=60)
        for index in range(20):
            await api.create(
                CONFIG_MAPS, namespace, {"metadata": {"name": f"seen-{index}"}, "data": {}}
            )
        names = {f"seen-{index}" for index in range(20)}
        await until(lambda: names <= {name for _, name in informer.cache}, timeout_s=60)
        await api.delete(CONFIG_MAPS, namespace, "seen-0")
        await until(lambda: (namespace, "seen-0") not in informer.cache, timeout_s=60)
    finally:
        await informer.stop()
        await api.close()
