"""The HTTP implementation of KubeApi against the in-memory API served on loopback in the API
server's REST shapes: request building, streaming watches, error translation, WebSocket attach,
and the whole sandbox backend over the network."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest

from envfarm.errors import (
    KubeConflict,
    KubeError,
    KubeGone,
    KubeInvalid,
    KubeNotFound,
    KubeUnavailable,
)
from envfarm.k8s.api import CONFIG_MAPS, ENV_POOLS, PODS
from envfarm.k8s.kubeconfig import KubeConfig, in_cluster_config, load_kubeconfig
from envfarm.k8s.objects import owner_reference
from envfarm.k8s.rest import RestKubeApi
from envfarm.sandbox.kubernetes.backend import KubernetesBackend, KubernetesBackendConfig
from envfarm.spec.task import load_task
from envfarm.testing.fake_sandbox import FakeSandbox, ok
from envfarm.testing.k8s.fakeruntime import FakePodRuntime
from envfarm.testing.k8s.kubelet import SimulatedKubelet
from envfarm.testing.k8s.memory import MemoryKubeApi
from envfarm.testing.k8s.memory_http import serve
from tests.plans import sandbox_spec

NS = "envs"
TASKS = Path(__file__).resolve().parents[2] / "tasks"


class Served:
    def __init__(self, token: str | None = "secret") -> None:
        self.memory = MemoryKubeApi()
        self.token = token

    async def __aenter__(self) -> Served:
        self.runner, self.url = await serve(self.memory, token=self.token)
        self.api = RestKubeApi(KubeConfig(server=self.url, token=self.token))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.api.close()
        await self.memory.close()
        await self.runner.cleanup()


async def test_crud_and_the_errors_of_each_over_http() -> None:
    async with Served() as served:
        api = served.api
        created = await api.create(CONFIG_MAPS, NS, {"metadata": {"name": "a"}, "data": {"k": "v"}})
        assert created["metadata"]["uid"]
        assert (await api.get(("v1", "ConfigMap"), NS, "a"))["data"] == {"k": "v"}
        listing = await api.list(CONFIG_MAPS, NS, label_selector="")
        assert [(i["kind"], i["metadata"]["name"]) for i in listing.items] == [("ConfigMap", "a")]
        with pytest.raises(KubeConflict) as exists:
            await api.create(CONFIG_MAPS, NS, {"metadata": {"name": "a"}})
        assert (exists.value.status, exists.value.reason) == (409, "AlreadyExists")
        with pytest.raises(KubeNotFound):
            await api.get(CONFIG_MAPS, NS, "missing")
        with pytest.raises(KubeInvalid) as invalid:
            await api.create(CONFIG_MAPS, NS, {"metadata": {"name": "Not Valid"}})
        assert invalid.value.status == 422
        stale = dict(created, data={"k": "first"})
        await api.replace(CONFIG_MAPS, NS, "a", stale)
        with pytest.raises(KubeConflict, match="has been modified"):
            await api.replace(CONFIG_MAPS, NS, "a", stale)
        patched = await api.patch(CONFIG_MAPS, NS, "a", {"data": {"k": None, "n": "1"}})
        assert patched["data"] == {"n": "1"}
        with pytest.raises(KubeConflict):
            await api.delete(CONFIG_MAPS, NS, "a", resource_version="1")
        await api.delete(CONFIG_MAPS, NS, "a")
        assert served.memory.all_keys() == []


async def test_subresources_and_cascading_deletion_over_http() -> None:
    async with Served() as served:
        api = served.api
        pool = await api.create(ENV_POOLS, NS, {"metadata": {"name": "p"}, "spec": {"replicas": 1}})
        pod = {
            "metadata": {"name": "p-1", "ownerReferences": [owner_reference(pool)]},
            "spec": {"containers": [{"name": "main", "image": "x"}]},
        }
        await api.create(PODS, NS, pod)
        await api.patch(ENV_POOLS, NS, "p", {"spec": {"replicas": 4}}, subresource="scale")
        scale = await api.get(ENV_POOLS, NS, "p", subresource="scale")
        assert scale["spec"] == {"replicas": 4}
        await api.patch(ENV_POOLS, NS, "p", {"status": {"replicas": 1}}, subresource="status")
        assert (await api.get(ENV_POOLS, NS, "p"))["status"] == {"replicas": 1}
        marked = await api.delete(ENV_POOLS, NS, "p", propagation="Foreground")
        assert marked["metadata"]["deletionTimestamp"]
        assert served.memory.all_keys() == []


async def test_watch_streams_large_objects_and_reports_410() -> None:
    async with Served() as served:
        api = served.api
        start = (await api.list(CONFIG_MAPS, NS)).resource_version
        big = "x" * 200_000  # one watch line far past 64 KiB
        await api.create(CONFIG_MAPS, NS, {"metadata": {"name": "big"}, "data": {"blob": big}})
        stream = api.watch(CONFIG_MAPS, NS, resource_version=start)
        event = await anext(stream)
        assert (event.type, event.object["data"]["blob"]) == ("ADDED", big)
        waiting = asyncio.ensure_future(anext(stream))
        await api.patch(CONFIG_MAPS, NS, "big", {"data": {"blob": "small"}})
        assert (await waiting).type == "MODIFIED"
        assert isinstance(stream, AsyncGenerator)
        await stream.aclose()
        served.memory.compact_history()
        with pytest.raises(KubeGone) as gone:
            await anext(api.watch(CONFIG_MAPS, NS, resource_version=start))
        assert gone.value.status == 410


async def test_authentication_and_unreachable_servers() -> None:
    async with Served() as served:
        anonymous = RestKubeApi(KubeConfig(server=served.url))
        with pytest.raises(KubeError) as refused:
            await anonymous.list(PODS, NS)
        assert refused.value.status == 401
        assert not refused.value.retryable
        await anonymous.close()
        url = served.url
    nobody = RestKubeApi(KubeConfig(server=url), timeout_s=5)
    with pytest.raises(KubeUnavailable) as down:
        await nobody.get(PODS, NS, "x")
    assert down.value.retryable
    await nobody.close()


async def test_the_sandbox_backend_over_http_and_websocket_attach() -> None:
    async with Served() as served:
        runtime = FakePodRuntime(lambda pod: FakeSandbox(lambda c: ok(f"ran: {c}")))
        SimulatedKubelet(served.memory, runtime=runtime, probe_period_s=0.01)
        task = load_task(TASKS / "redis-rate-limiter")
        verifier = task.config.verifier.model_copy(update={"environment_mode": "shared"})
        task = dataclasses.replace(
            task, config=task.config.model_copy(update={"verifier": verifier})
        )
        for channel in ("attach", "exec"):
            config = KubernetesBackendConfig(namespace=NS, channel=channel)
            backend = KubernetesBackend(served.api, config)
            sandbox = backend.create(
                sandbox_spec(task), await backend.prepare(sandbox_spec(task)), run_id="http"
            )
            await sandbox.start()
            result = await sandbox.exec("redis-cli ping")
            assert (result.exit_code, result.stdout) == (0, "ran: redis-cli ping")
            payload = bytes(range(256)) * 8000  # 2 MB: several stdin messages
            await sandbox.write_file("/data/blob", payload)
            assert await sandbox.read_file("/data/blob") == payload
            await sandbox.stop()
            await backend.close()
        assert served.memory.all_keys() == []


PLUGIN = """#!/bin/sh
# an ExecCredential as a cloud login prints it; run n prints line n of the tokens file
n=$(cat "$0.count" 2>/dev/null || echo 0); echo $((n + 1)) > "$0.count"
token=$(sed -n "$((n + 1))p" "$0.tokens")
printf '{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",'
printf ' "status": {"token": "%s"}}' "$token"
"""


def kubeconfig(tmp_path: Path, server: str, ca: str | None = None) -> Path:
    """A kubeconfig with a token-file user (context ``dev``) and an exec-plugin user (``cloud``)."""
    (tmp_path / "token").write_text("from-file\n")
    plugin = tmp_path / "login"
    plugin.write_text(PLUGIN)
    plugin.chmod(0o755)
    authority = ""
    if ca is not None:
        authority = f"    certificate-authority-data: {base64.b64encode(ca.encode()).decode()}\n"
    config = tmp_path / "config"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: dev\n"
        "contexts:\n- name: dev\n  context: {cluster: c, user: u, namespace: envs}\n"
        "- name: cloud\n  context: {cluster: c, user: plugin}\n"
        f"clusters:\n- name: c\n  cluster:\n    server: {server}/\n{authority}"
        "users:\n- name: u\n  user: {tokenFile: token}\n"
        "- name: plugin\n  user:\n    exec:\n"
        "      apiVersion: client.authentication.k8s.io/v1\n"
        f"      command: {plugin}\n      interactiveMode: Never\n"
    )
    return config


def plugin_runs(tmp_path: Path) -> int:
    return int((tmp_path / "login.count").read_text())


async def test_kubeconfig_file_and_in_cluster_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    config = kubeconfig(tmp_path, "https://10.0.0.1:6443", ca)
    loaded = await load_kubeconfig(config)
    assert (loaded.server, loaded.ca_pem, loaded.namespace) == ("https://10.0.0.1:6443", ca, "envs")
    assert loaded.credentials is not None
    assert await loaded.credentials.header() == {"Authorization": "Bearer from-file"}
    with pytest.raises(KubeInvalid, match="nope"):
        await load_kubeconfig(config, context="nope")
    account = tmp_path / "sa"
    account.mkdir()
    (account / "token").write_text("t")
    (account / "ca.crt").write_text(ca)
    (account / "namespace").write_text("envfarm-sandboxes")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    cluster = in_cluster_config(account)
    assert (cluster.server, cluster.namespace) == ("https://10.96.0.1:443", "envfarm-sandboxes")
    assert cluster.credentials is not None
    assert await cluster.credentials.header() == {"Authorization": "Bearer t"}
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(KubeInvalid, match="not running in a cluster"):
        in_cluster_config(account)


async def test_an_exec_plugin_logs_in_and_again_when_its_token_is_refused(
    tmp_path: Path,
) -> None:
    """A user that is an ``exec`` credential plugin, as EKS, GKE and AKS kubeconfigs have:
    its token is used until the server refuses it (401), then the plugin runs again, once,
    and the request is sent again with the new token."""
    async with Served(token="secret") as served:
        config = kubeconfig(tmp_path, served.url)
        (tmp_path / "login.tokens").write_text("expired\nsecret\nexpired\nexpired\n")
        api = RestKubeApi(await load_kubeconfig(config, context="cloud"))
        assert plugin_runs(tmp_path) == 1  # loading logs in
        await api.create(CONFIG_MAPS, NS, {"metadata": {"name": "a"}, "data": {"k": "v"}})
        assert plugin_runs(tmp_path) == 2  # refused, logged in again, sent again
        listed = await api.list(CONFIG_MAPS, NS)
        assert [item["metadata"]["name"] for item in listed.items] == ["a"]
        assert plugin_runs(tmp_path) == 2  # the token is reused while the server takes it
        await api.close()
    async with Served(token="secret") as refusing:
        (tmp_path / "login.count").unlink()
        (tmp_path / "login.tokens").write_text("expired\nexpired\nexpired\n")
        config = kubeconfig(tmp_path, refusing.url)
        api = RestKubeApi(await load_kubeconfig(config, context="cloud"))
        with pytest.raises(KubeError) as refused:
            await api.get(CONFIG_MAPS, NS, "a")
        assert refused.value.status == 401
        assert plugin_runs(tmp_path) == 2  # one login again, not a loop
        await api.close()
