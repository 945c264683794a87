"""The in-memory Kubernetes API keeps the semantics controllers rely on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from envfarm.errors import KubeConflict, KubeGone, KubeInvalid, KubeNotFound
from envfarm.k8s.api import CONFIG_MAPS, ENV_POOLS, PODS, KubeObject, WatchEvent
from envfarm.k8s.objects import owner_reference
from envfarm.testing.k8s.memory import MemoryKubeApi

NS = "envs"


def _cm(name: str, **labels: str) -> KubeObject:
    return {"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}


def _pool(name: str, replicas: int = 2) -> KubeObject:
    return {"metadata": {"name": name}, "spec": {"replicas": replicas, "task": "t"}}


def _pod(name: str, owner: KubeObject | None = None, **extra: Any) -> KubeObject:
    metadata: KubeObject = {"name": name, **extra}
    if owner is not None:
        metadata["ownerReferences"] = [owner_reference(owner)]
    return {"metadata": metadata, "spec": {"containers": [{"name": "main", "image": "x"}]}}


async def _collect(stream: AsyncIterator[WatchEvent], count: int) -> list[WatchEvent]:
    events = []
    async for event in stream:
        events.append(event)
        if len(events) == count:
            break
    return events


async def test_create_get_list_and_the_errors_of_each() -> None:
    api = MemoryKubeApi()
    created = await api.create(CONFIG_MAPS, NS, _cm("a", app="x"))
    assert created["metadata"]["uid"]
    assert created["metadata"]["creationTimestamp"]
    assert created["metadata"]["generation"] == 1
    assert (created["apiVersion"], created["kind"]) == ("v1", "ConfigMap")
    await api.create(("v1", "ConfigMap"), NS, _cm("b", app="y"))
    await api.create(CONFIG_MAPS, "other", _cm("c", app="x"))
    with pytest.raises(KubeConflict, match="already exists") as conflict:
        await api.create(CONFIG_MAPS, NS, _cm("a"))
    assert conflict.value.status == 409
    with pytest.raises(KubeNotFound) as missing:
        await api.get(CONFIG_MAPS, NS, "nope")
    assert missing.value.status == 404
    with pytest.raises(KubeInvalid, match="not a valid name"):
        await api.create(CONFIG_MAPS, NS, _cm("Bad_Name"))
    with pytest.raises(KubeInvalid, match="label"):
        await api.create(CONFIG_MAPS, NS, _cm("d", app="no spaces"))
    names = [o["metadata"]["name"] for o in (await api.list(CONFIG_MAPS, NS)).items]
    assert names == ["a", "b"]
    selected = await api.list(CONFIG_MAPS, None, label_selector="app in (x)")
    assert [o["metadata"]["name"] for o in selected.items] == ["a", "c"]
    assert (await api.list(CONFIG_MAPS, None, label_selector="app!=x")).items[0]["data"]
    by_name = await api.list(CONFIG_MAPS, NS, field_selector="metadata.name=b")
    assert [o["metadata"]["name"] for o in by_name.items] == ["b"]


async def test_generate_name_gives_distinct_names() -> None:
    api = MemoryKubeApi()
    body = {"metadata": {"generateName": "pool-"}, "spec": {"containers": [{"name": "m"}]}}
    names = {(await api.create(PODS, NS, body))["metadata"]["name"] for _ in range(20)}
    assert len(names) == 20
    assert all(name.startswith("pool-") and len(name) == 10 for name in names)


async def test_optimistic_concurrency_and_versions() -> None:
    api = MemoryKubeApi()
    first = await api.create(CONFIG_MAPS, NS, _cm("a"))
    stale = dict(first)
    first["data"] = {"k": "w"}
    second = await api.replace(CONFIG_MAPS, NS, "a", first)
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    stale["data"] = {"k": "lost update"}
    with pytest.raises(KubeConflict, match="has been modified"):
        await api.replace(CONFIG_MAPS, NS, "a", stale)
    precondition = {"metadata": {"resourceVersion": stale["metadata"]["resourceVersion"]}}
    with pytest.raises(KubeConflict):
        await api.patch(CONFIG_MAPS, NS, "a", precondition | {"data": {"k": "z"}})
    patched = await api.patch(CONFIG_MAPS, NS, "a", {"data": {"k": None, "n": "1"}})
    assert patched["data"] == {"n": "1"}
    again = await api.patch(CONFIG_MAPS, NS, "a", {"data": {"n": "1"}})
    assert again["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]


async def test_generation_status_and_scale_subresources() -> None:
    api = MemoryKubeApi()
    pool = await api.create(ENV_POOLS, NS, _pool("p") | {"status": {"replicas": 9}})
    assert pool["status"] == {}
    labelled = await api.patch(ENV_POOLS, NS, "p", {"metadata": {"labels": {"a": "b"}}})
    assert labelled["metadata"]["generation"] == 1
    ignored = await api.patch(ENV_POOLS, NS, "p", {"status": {"replicas": 5}})
    assert ignored["status"] == {}
    status = await api.patch(
        ENV_POOLS, NS, "p", {"status": {"replicas": 1, "selector": "s=1"}}, subresource="status"
    )
    assert status["status"]["replicas"] == 1
    assert status["metadata"]["generation"] == 1
    spec = await api.patch(ENV_POOLS, NS, "p", {"spec": {"replicas": 3}})
    assert spec["metadata"]["generation"] == 2
    scale = await api.get(ENV_POOLS, NS, "p", subresource="scale")
    assert scale["kind"] == "Scale"
    assert scale["spec"] == {"replicas": 3}
    assert scale["status"] == {"replicas": 1, "selector": "s=1"}
    await api.patch(ENV_POOLS, NS, "p", {"spec": {"replicas": 7}}, subresource="scale")
    scaled = await api.get(ENV_POOLS, NS, "p")
    assert scaled["spec"]["replicas"] == 7
    assert scaled["metadata"]["generation"] == 3
    with pytest.raises(KubeInvalid):
        await api.patch(ENV_POOLS, NS, "p", {"spec": {"replicas": -1}}, subresource="scale")
    await api.create(CONFIG_MAPS, NS, _cm("p"))
    with pytest.raises(KubeNotFound, match="scale"):
        await api.get(CONFIG_MAPS, NS, "p", subresource="scale")


async def test_pod_specs_are_immutable_but_for_what_kubernetes_allows() -> None:
    api = MemoryKubeApi()
    await api.create(PODS, NS, _pod("p"))
    await api.patch(PODS, NS, "p", {"spec": {"activeDeadlineSeconds": 60}})
    with pytest.raises(KubeInvalid, match="pod updates may not change"):
        await api.patch(PODS, NS, "p", {"spec": {"hostname": "other"}})


async def test_finalizers_hold_an_object_until_the_last_is_removed() -> None:
    api = MemoryKubeApi()
    await api.create(CONFIG_MAPS, NS, _cm("a") | {"metadata": {"name": "a", "finalizers": ["x/y"]}})
    marked = await api.delete(CONFIG_MAPS, NS, "a")
    assert marked["metadata"]["deletionTimestamp"]
    assert (await api.get(CONFIG_MAPS, NS, "a"))["metadata"]["finalizers"] == ["x/y"]
    with pytest.raises(KubeInvalid, match="no new finalizers"):
        await api.patch(CONFIG_MAPS, NS, "a", {"metadata": {"finalizers": ["x/y", "z/w"]}})
    await api.patch(CONFIG_MAPS, NS, "a", {"data": {"still": "updatable"}})
    await api.patch(CONFIG_MAPS, NS, "a", {"metadata": {"finalizers": None}})
    with pytest.raises(KubeNotFound):
        await api.get(CONFIG_MAPS, NS, "a")


async def test_background_deletion_cascades_through_owner_chains() -> None:
    api = MemoryKubeApi()
    pool = await api.create(ENV_POOLS, NS, _pool("p"))
    pod = await api.create(PODS, NS, _pod("p-1", pool))
    await api.create(
        CONFIG_MAPS,
        NS,
        _cm("c") | {"metadata": {"name": "c", "ownerReferences": [owner_reference(pod)]}},
    )
    await api.create(PODS, NS, _pod("unowned"))
    await api.delete(ENV_POOLS, NS, "p")
    assert [key[2] for key in api.all_keys()] == ["unowned"]


async def test_a_dependent_with_another_live_owner_stays() -> None:
    api = MemoryKubeApi()
    one = await api.create(ENV_POOLS, NS, _pool("one"))
    two = await api.create(ENV_POOLS, NS, _pool("two"))
    body = _pod("shared")
    body["metadata"]["ownerReferences"] = [
        owner_reference(one),
        owner_reference(two, controller=False),
    ]
    await api.create(PODS, NS, body)
    await api.delete(ENV_POOLS, NS, "one")
    left = await api.get(PODS, NS, "shared")
    assert [ref["name"] for ref in left["metadata"]["ownerReferences"]] == ["two"]


async def test_an_owner_reference_to_nothing_is_collected() -> None:
    api = MemoryKubeApi()
    ghost = {"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "no-such-uid"}
    body = _pod("orphan")
    body["metadata"]["ownerReferences"] = [ghost]
    await api.create(PODS, NS, body)
    assert api.all_keys() == []


async def test_foreground_deletion_waits_for_dependents() -> None:
    api = MemoryKubeApi()
    pool = await api.create(ENV_POOLS, NS, _pool("p"))
    await api.create(PODS, NS, _pod("free", pool))
    await api.create(PODS, NS, _pod("held", pool, finalizers=["test/hold"]))
    marked = await api.delete(ENV_POOLS, NS, "p", propagation="Foreground")
    assert "foregroundDeletion" in marked["metadata"]["finalizers"]
    assert {key[2] for key in api.all_keys()} == {"p", "held"}
    assert (await api.get(PODS, NS, "held"))["metadata"]["deletionTimestamp"]
    await api.patch(PODS, NS, "held", {"metadata": {"finalizers": None}})
    assert api.all_keys() == []


async def test_orphan_deletion_keeps_dependents_without_the_reference() -> None:
    api = MemoryKubeApi()
    pool = await api.create(ENV_POOLS, NS, _pool("p"))
    await api.create(PODS, NS, _pod("kept", pool))
    await api.delete(ENV_POOLS, NS, "p", propagation="Orphan")
    kept = await api.get(PODS, NS, "kept")
    assert "ownerReferences" not in kept["metadata"]


async def test_watch_replays_from_a_version_and_follows_selectors() -> None:
    api = MemoryKubeApi()
    start = (await api.list(CONFIG_MAPS, NS)).resource_version
    await api.create(CONFIG_MAPS, NS, _cm("a", pool="p"))
    stream = api.watch(CONFIG_MAPS, NS, resource_version=start, label_selector="pool=p")
    first = await _collect(stream, 1)
    assert [(e.type, e.object["metadata"]["name"]) for e in first] == [("ADDED", "a")]
    await api.patch(CONFIG_MAPS, NS, "a", {"data": {"k": "2"}})
    await api.patch(CONFIG_MAPS, NS, "a", {"metadata": {"labels": {"pool": None}}})
    await api.patch(CONFIG_MAPS, NS, "a", {"metadata": {"labels": {"pool": "p"}}})
    await api.create(CONFIG_MAPS, NS, _cm("other", pool="q"))
    await api.delete(CONFIG_MAPS, NS, "a")
    events = await _collect(stream, 4)
    assert [e.type for e in events] == ["MODIFIED", "DELETED", "ADDED", "DELETED"]
    await stream.aclose()


async def test_watch_without_a_version_starts_with_the_current_objects() -> None:
    api = MemoryKubeApi()
    await api.create(CONFIG_MAPS, NS, _cm("a"))
    await api.create(CONFIG_MAPS, "elsewhere", _cm("b"))
    stream = api.watch(CONFIG_MAPS, None)
    events = await _collect(stream, 2)
    assert {(e.type, e.object["metadata"]["name"]) for e in events} == {
        ("ADDED", "a"),
        ("ADDED", "b"),
    }
    api.close_watches()
    assert [e async for e in stream] == []


async def test_a_version_older_than_the_history_is_gone() -> None:
    api = MemoryKubeApi(history=3)
    start = (await api.list(CONFIG_MAPS, NS)).resource_version
    for index in range(5):
        await api.create(CONFIG_MAPS, NS, _cm(f"c{index}"))
    with pytest.raises(KubeGone) as gone:
        await anext(api.watch(CONFIG_MAPS, NS, resource_version=start))
    assert gone.value.status == 410
    recent = (await api.list(CONFIG_MAPS, NS)).resource_version
    api.compact_history()
    with pytest.raises(KubeGone):
        await anext(api.watch(CONFIG_MAPS, NS, resource_version=str(int(recent) - 1)))
    live = api.watch(CONFIG_MAPS, NS, resource_version=recent)
    waiting = asyncio.ensure_future(anext(live))
    await api.create(CONFIG_MAPS, NS, _cm("after"))
    assert (await waiting).object["metadata"]["name"] == "after"
    await live.aclose()


async def test_a_slow_watcher_is_dropped_with_gone() -> None:
    api = MemoryKubeApi(watch_buffer=2)
    stream = api.watch(CONFIG_MAPS, NS, resource_version="1")
    waiting = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0)
    for index in range(5):
        await api.create(CONFIG_MAPS, NS, _cm(f"c{index}"))
    await waiting
    with pytest.raises(KubeGone):
        async for _ in stream:
            pass


async def test_a_watch_times_out_quietly() -> None:
    api = MemoryKubeApi()
    assert [
        e async for e in api.watch(CONFIG_MAPS, NS, resource_version="0", timeout_seconds=0.01)
    ] == []
