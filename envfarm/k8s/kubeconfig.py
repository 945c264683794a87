"""Where the API server is and how to authenticate, read by the maintained client library.

``kubernetes_asyncio`` reads a kubeconfig as ``kubectl`` does: the files of ``$KUBECONFIG``
merged (else ``~/.kube/config``), the current or a named context, its cluster's server and CA,
and its user's credentials: a token or token file, a client certificate, basic auth, an OIDC or
GCP auth provider, or an ``exec`` credential plugin (how EKS, GKE and AKS kubeconfigs log in).
In a cluster it reads the pod's service account, its token read again as it rotates. envfarm
takes the configuration and the credentials from it and keeps its own HTTP, watches and pod
streams (``rest.py``; docs/kubernetes.md says why).

``KubeConfig`` is what the API server is and how to trust it. Its ``credentials`` give the
Authorization header of each request: an exec plugin runs when the header is first needed, again
when its token has expired, and again when the server answers 401 (``renew``), as ``kubectl``
does. A plugin or a file that fails is a ``KubeInvalid`` naming the kubeconfig.
"""

from __future__ import annotations

import asyncio
import datetime
import ssl
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.config import ConfigException, load_kube_config
from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader
from kubernetes_asyncio.config.kube_config import KubeConfigLoader
from pydantic import BaseModel, ConfigDict, PrivateAttr

from envfarm.errors import KubeInvalid

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REFRESH_S = 60.0
EXPIRY_MARGIN_S = 30.0


class Credentials:
    """A user's Authorization header as the library loads it, refreshed when it must be."""

    def __init__(self, configuration: Configuration, loader: KubeConfigLoader | None) -> None:
        self.configuration = configuration
        self.loader = loader
        self.plugin: bool = loader is not None and _uses_exec(loader)
        self._stale = False  # loading ran the plugin once
        self._lock = asyncio.Lock()

    async def header(self) -> dict[str, str]:
        if self._stale or self._expired():
            async with self._lock:
                if self._stale or self._expired():
                    await self._run_plugin()
        # runs the refresh hook: a service account's token is read again as it rotates
        value = await self.configuration.get_api_key_with_prefix("BearerToken")
        # a token file's final newline is not part of the token (kubectl trims it too)
        return {"Authorization": str(value).strip()} if value else {}

    def renew(self) -> bool:
        """After a 401: run the plugin again before the next request (False: nothing to renew)."""
        self._stale = self.plugin
        return self.plugin

    def _expired(self) -> bool:
        expiry = getattr(self.loader, "exec_plugin_expiry", None) if self.plugin else None
        if not isinstance(expiry, datetime.datetime):
            return False
        left = expiry - datetime.datetime.now(tz=expiry.tzinfo)
        return left.total_seconds() < EXPIRY_MARGIN_S

    async def _run_plugin(self) -> None:
        assert self.loader is not None
        if hasattr(self.loader, "exec_plugin_expiry"):
            del self.loader.exec_plugin_expiry  # the library reuses a token until it expires
        try:
            await self.loader.load_from_exec_plugin()
        except (ConfigException, OSError, ValueError) as exc:
            raise KubeInvalid(f"the kubeconfig's exec credential plugin failed: {exc}") from exc
        self.configuration.api_key["BearerToken"] = self.loader.token
        self._stale = False


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
    _credentials: Credentials | None = PrivateAttr(default=None)

    @property
    def credentials(self) -> Credentials | None:
        """The library's credentials, when the configuration was loaded through it."""
        return self._credentials

    def ssl_context(self) -> ssl.SSLContext | bool:
        if not self.server.startswith("https://"):
            return False
        if self.insecure:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            context = ssl.create_default_context(cadata=self.ca_pem or None)
        if self.client_cert_pem and self.client_key_pem:
            with tempfile.TemporaryDirectory() as folder:
                cert, key = Path(folder, "cert.pem"), Path(folder, "key.pem")
                cert.write_text(self.client_cert_pem)
                key.write_text(self.client_key_pem)
                key.chmod(0o600)
                context.load_cert_chain(cert, key)
        return context


class TokenSource:
    """The Authorization header of each request: the library's credentials, else the
    configuration's token, its file re-read at most every ``TOKEN_REFRESH_S`` seconds."""

    def __init__(self, config: KubeConfig) -> None:
        self.config = config
        self._token = config.token
        self._read_at = 0.0

    async def header(self) -> dict[str, str]:
        if self.config.credentials is not None:
            return await self.config.credentials.header()
        path = self.config.token_file
        if path and time.monotonic() - self._read_at > TOKEN_REFRESH_S:
            self._token = (await asyncio.to_thread(Path(path).read_text)).strip()
            self._read_at = time.monotonic()
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def renew(self) -> bool:
        credentials = self.config.credentials
        return credentials.renew() if credentials is not None else False


async def load_kubeconfig(path: Path | None = None, context: str | None = None) -> KubeConfig:
    """``path`` (else the files of ``$KUBECONFIG``, else ``~/.kube/config``), at ``context``
    (else its current one)."""
    where = str(path) if path is not None else "the kubeconfig"
    configuration = Configuration()
    try:
        loader = await load_kube_config(
            config_file=str(path) if path is not None else None,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except (ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
        raise KubeInvalid(f"{where}: {exc or type(exc).__name__}", status=400) from exc
    config = _config(configuration, _namespace(loader))
    config._credentials = Credentials(configuration, loader)
    return config


def in_cluster_config(root: Path = SERVICE_ACCOUNT) -> KubeConfig:
    """The pod's service account (its token re-read as it rotates)."""
    configuration = Configuration()
    try:
        loader = InClusterConfigLoader(
            token_filename=str(root / "token"), cert_filename=str(root / "ca.crt")
        )
        loader.load_and_set(configuration)
    except ConfigException as exc:
        raise KubeInvalid(
            f"not running in a cluster: {exc} (KUBERNETES_SERVICE_HOST/PORT and the service "
            f"account at {root} are needed)",
            status=400,
        ) from exc
    namespace = root / "namespace"
    config = _config(
        configuration, namespace.read_text().strip() if namespace.is_file() else "default"
    )
    config._credentials = Credentials(configuration, None)
    return config


def _config(configuration: Configuration, namespace: str) -> KubeConfig:
    return KubeConfig(
        server=str(configuration.host).rstrip("/"),
        ca_pem=_read(configuration.ssl_ca_cert),
        insecure=not configuration.verify_ssl,
        client_cert_pem=_read(configuration.cert_file),
        client_key_pem=_read(configuration.key_file),
        namespace=namespace,
    )


def _read(path: Any) -> str | None:
    return Path(str(path)).read_text() if path else None


def _namespace(loader: KubeConfigLoader) -> str:
    context = loader.current_context or {}
    return str((context.get("context") or {}).get("namespace") or "default")


def _uses_exec(loader: KubeConfigLoader) -> bool:
    user = loader._user  # the library exposes the active user only through the loader
    return user is not None and "exec" in user
