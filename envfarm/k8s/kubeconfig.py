"""Where the API server is and how to authenticate: a kubeconfig file, or the pod's service
account when running in a cluster.

Supported: a context's cluster ``server``, ``certificate-authority`` (file or ``-data``),
``insecure-skip-tls-verify``, and a user's ``token``, ``tokenFile`` or client certificate and
key (files or ``-data``). Exec and auth-provider plugins (cloud logins) are refused with a
clear error: run ``kubectl`` once to get a token, or use a service account token. In a
cluster, the service account token is read again before it expires (bound tokens rotate).
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict

from envfarm.errors import KubeInvalid

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REFRESH_S = 60.0


class KubeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: str
    ca_pem: str | None = None
    insecure: bool = False
    token: str | None = None
    token_file: str | None = None
    client_cert_pem: str | None = None
    client_key_pem: str | None = None
    namespace: str = "default"

    def ssl_context(self) -> ssl.SSLContext | bool:
        if not self.server.startswith("https://"):
            return False
        if self.insecure:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            context = (
                ssl.create_default_context(cadata=self.ca_pem)
                if self.ca_pem
                else (ssl.create_default_context())
            )
        if self.client_cert_pem and self.client_key_pem:
            with tempfile.TemporaryDirectory() as folder:
                cert, key = Path(folder, "cert.pem"), Path(folder, "key.pem")
                cert.write_text(self.client_cert_pem)
                key.write_text(self.client_key_pem)
                key.chmod(0o600)
                context.load_cert_chain(cert, key)
        return context


class TokenSource:
    """The bearer token, re-read from its file at most every ``TOKEN_REFRESH_S`` seconds."""

    def __init__(self, config: KubeConfig) -> None:
        self.config = config
        self._token = config.token
        self._read_at = 0.0

    def header(self) -> dict[str, str]:
        path = self.config.token_file
        if path and time.monotonic() - self._read_at > TOKEN_REFRESH_S:
            self._token = Path(path).read_text().strip()
            self._read_at = time.monotonic()
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}


def _named(entries: Any, name: str, what: str, where: str) -> dict[str, Any]:
    for entry in entries or []:
        if entry.get("name") == name:
            return dict(entry.get(what) or {})
    raise KubeInvalid(f"{where}: no {what} named {name!r}", status=400)


def _data_or_file(section: dict[str, Any], key: str, base: Path) -> str | None:
    if section.get(f"{key}-data"):
        return base64.b64decode(str(section[f"{key}-data"])).decode()
    if section.get(key):
        return (base / str(section[key])).read_text()
    return None


def load_kubeconfig(path: Path | None = None, context: str | None = None) -> KubeConfig:
    """The first file of ``$KUBECONFIG`` (else ``~/.kube/config``), its current context."""
    if path is None:
        first = (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
        path = Path(first) if first else Path.home() / ".kube" / "config"
    where = str(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise KubeInvalid(f"{where}: cannot read the kubeconfig: {exc}", status=400) from exc
    name = context or data.get("current-context")
    if not name:
        raise KubeInvalid(f"{where}: current-context: none set and none given", status=400)
    ctx = _named(data.get("contexts"), name, "context", where)
    cluster = _named(data.get("clusters"), ctx.get("cluster", ""), "cluster", where)
    user = _named(data.get("users"), ctx.get("user", ""), "user", where) if ctx.get("user") else {}
    for plugin in ("exec", "auth-provider"):
        if plugin in user:
            raise KubeInvalid(
                f"{where}: users.{ctx.get('user')}.{plugin}: credential plugins are not "
                "supported; give a token (or tokenFile) or a client certificate",
                status=400,
            )
    base = path.parent
    return KubeConfig(
        server=str(cluster.get("server", "")).rstrip("/"),
        ca_pem=_data_or_file(cluster, "certificate-authority", base),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        token=user.get("token"),
        token_file=str(base / user["tokenFile"]) if user.get("tokenFile") else None,
        client_cert_pem=_data_or_file(user, "client-certificate", base),
        client_key_pem=_data_or_file(user, "client-key", base),
        namespace=ctx.get("namespace") or "default",
    )


def in_cluster_config(root: Path = SERVICE_ACCOUNT) -> KubeConfig:
    host, port = (
        os.environ.get("KUBERNETES_SERVICE_HOST"),
        os.environ.get("KUBERNETES_SERVICE_PORT"),
    )
    if not host or not port or not (root / "token").is_file():
        raise KubeInvalid(
            "not running in a cluster: KUBERNETES_SERVICE_HOST/PORT or the service account "
            f"token at {root}/token is missing",
            status=400,
        )
    namespace = root / "namespace"
    return KubeConfig(
        server=f"https://{host}:{port}" if ":" not in host else f"https://[{host}]:{port}",
        ca_pem=(root / "ca.crt").read_text(),
        token_file=str(root / "token"),
        namespace=namespace.read_text().strip() if namespace.is_file() else "default",
    )
