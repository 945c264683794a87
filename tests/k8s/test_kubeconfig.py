"""envfarm's own client logs in through a kubeconfig ``exec`` credential plugin, as EKS, GKE and
AKS kubeconfigs do, against a real API server: the plugin runs when the kubeconfig is loaded,
its token is sent, a 403 is an error naming what was refused, and on a 401 the plugin runs once
more and the request is sent again.

The plugin is a script of the test's that prints an ``ExecCredential`` with the next token of a
list (the last one again once the list is spent) and counts its runs. The tokens are a service
account's, bound to the built-in ``view`` ClusterRole in a namespace of the test's own."""

from __future__ import annotations

import base64
import json
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from envfarm.errors import KubeError
from envfarm.k8s.api import PODS, Resource
from envfarm.k8s.kubeconfig import load_kubeconfig
from envfarm.k8s.rest import RestKubeApi
from tests.k8s.cluster import Cluster

NAMESPACES = Resource(api_version="v1", kind="Namespace", plural="namespaces", namespaced=False)
PLUGIN = """\
import json, pathlib, sys
folder = pathlib.Path(sys.argv[1])
runs = folder / "runs"
done = len(runs.read_text().splitlines()) if runs.exists() else 0
with runs.open("a") as log:
    log.write("run\\n")
tokens = (folder / "tokens").read_text().split()
token = tokens[min(done, len(tokens) - 1)]
credential = {"token": token}
print(json.dumps({
    "apiVersion": "client.authentication.k8s.io/v1",
    "kind": "ExecCredential",
    "status": credential,
}))
"""


@pytest.fixture(scope="module")
def reader(cluster: Cluster) -> Iterator[tuple[str, str]]:
    """A namespace of the test's own and a token of an account that may view it."""
    namespace = f"kubeconfig-{secrets.token_hex(3)}"
    try:
        cluster.kubectl("create", "namespace", namespace)
        cluster.kubectl("-n", namespace, "create", "serviceaccount", "reader")
        cluster.kubectl(
            *("-n", namespace, "create", "rolebinding", "reader", "--clusterrole=view"),
            f"--serviceaccount={namespace}:reader",
        )
        token = cluster.kubectl("-n", namespace, "create", "token", "reader", "--duration=1h")
        yield namespace, token.strip()
    finally:
        cluster.kubectl("delete", "namespace", "--ignore-not-found", "--wait=false", namespace)


def exec_kubeconfig(cluster: Cluster, folder: Path, tokens: list[str]) -> Path:
    """A kubeconfig for the admin's server and CA whose user is the plugin, handing out
    ``tokens`` in turn."""
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    server = admin["clusters"][0]["cluster"]
    ca = (
        server.get("certificate-authority-data")
        or base64.b64encode(Path(server["certificate-authority"]).read_bytes()).decode()
    )
    (folder / "plugin.py").write_text(PLUGIN)
    (folder / "tokens").write_text("\n".join(tokens) + "\n")
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(folder / "plugin.py"), str(folder)],
            "interactiveMode": "Never",
        }
    }
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "test",
                "cluster": {"server": server["server"], "certificate-authority-data": ca},
            }
        ],
        "users": [{"name": "plugin", "user": user}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "plugin"}}],
        "current-context": "test",
    }
    path = folder / "kubeconfig"
    path.write_text(json.dumps(config))
    return path


def runs(folder: Path) -> int:
    return len((folder / "runs").read_text().splitlines())


async def test_a_plugin_token_logs_in(
    cluster: Cluster, reader: tuple[str, str], tmp_path: Path
) -> None:
    namespace, token = reader
    api = RestKubeApi(await load_kubeconfig(exec_kubeconfig(cluster, tmp_path, [token])))
    try:
        assert runs(tmp_path) == 1  # loading the kubeconfig ran it
        found = await api.get(NAMESPACES, "", namespace)
        assert found["metadata"]["name"] == namespace
        assert (await api.list(PODS, namespace)).items == []
        with pytest.raises(KubeError) as refused:  # view, in its own namespace only
            await api.list(PODS, "kube-system")
        assert refused.value.status == 403
        assert "forbidden" in str(refused.value)
        assert f"system:serviceaccount:{namespace}:reader" in str(refused.value)
        assert runs(tmp_path) == 1  # the token was kept: a 403 is not a login problem
    finally:
        await api.close()


async def test_a_refused_token_runs_the_plugin_again(
    cluster: Cluster, reader: tuple[str, str], tmp_path: Path
) -> None:
    namespace, token = reader
    kubeconfig = exec_kubeconfig(cluster, tmp_path, ["expired-token", token])
    api = RestKubeApi(await load_kubeconfig(kubeconfig))
    try:
        assert (await api.list(PODS, namespace)).items == []
        assert runs(tmp_path) == 2
    finally:
        await api.close()


async def test_a_plugin_that_never_logs_in_is_a_401(
    cluster: Cluster, reader: tuple[str, str], tmp_path: Path
) -> None:
    namespace, _ = reader
    api = RestKubeApi(await load_kubeconfig(exec_kubeconfig(cluster, tmp_path, ["bogus"])))
    try:
        with pytest.raises(KubeError) as refused:
            await api.list(PODS, namespace)
        assert refused.value.status == 401
        assert "refused the credentials" in str(refused.value)
        assert runs(tmp_path) == 2  # once at loading, once more after the 401; no loop
    finally:
        await api.close()
