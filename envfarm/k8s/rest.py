"""``KubeApi`` over HTTP: aiohttp against a real API server, credentials from ``kubeconfig``.

Requests are the server's REST shapes (``api.Resource.path``): merge patches with
``application/merge-patch+json``, deletion with ``DeleteOptions`` (propagation policy, grace
period, resourceVersion precondition), watches as a chunked stream of JSON lines read as they
come (no line length limit: a pod with inline files can exceed 64 KiB). Errors are translated
once, here: the server's ``Status`` code and reason become ``KubeNotFound`` (404),
``KubeConflict`` (409), ``KubeGone`` (410, also an ERROR event in a watch), ``KubeInvalid``
(400, 422), ``KubeUnavailable`` (429, 5xx, a connection that failed or timed out), and a plain
``KubeError`` for the rest (401 and 403 included: retrying cannot help).

``attach`` opens one WebSocket per call (``pods/attach``, or ``pods/exec`` with a command),
speaking the remote-command channel protocol ``v5.channel.k8s.io`` (``v4`` accepted): every
binary message starts with its channel byte (0 stdin, 1 stdout, 2 stderr, 3 the final status),
and v5 closes stdin with the message ``255, 0``. Each stream has its own connection; nothing is
shared between concurrent streams.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import aiohttp

from envfarm.errors import (
    KubeUnavailable,
)
from envfarm.k8s.api import (
    PODS,
    Command,
    KubeObject,
    ObjectList,
    PodStream,
    Propagation,
    Resource,
    ResourceLike,
    Subresource,
    WatchEvent,
    resolve,
)
from envfarm.k8s.kubeconfig import KubeConfig, TokenSource
from envfarm.k8s.rest_wire import CHANNEL_PROTOCOLS, WebSocketPodStream, translate


class RestKubeApi:
    def __init__(
        self,
        config: KubeConfig,
        *,
        resources: list[Resource] | None = None,
        timeout_s: float = 30.0,
        connections: int = 100,
    ) -> None:
        self.config = config
        self.tokens = TokenSource(config)
        self._extra = {(r.api_version, r.kind): r for r in resources or []}
        self._ssl = config.ssl_context()
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._connections = connections

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._connections, ssl=self._ssl)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    def _url(self, path: str, params: dict[str, Any] | None = None) -> str:
        query = {k: v for k, v in (params or {}).items() if v is not None}
        return self.config.server + path + (f"?{urlencode(query, doseq=True)}" if query else "")

    async def _call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        data = None if body is None else json.dumps(body).encode()
        what = f"{method} {path}"
        url = self._url(path, params)
        status, parsed = await self._send(method, url, data, content_type, what)
        # a credential plugin's token the server no longer takes: run the plugin again, once
        if status == 401 and self.tokens.renew():
            status, parsed = await self._send(method, url, data, content_type, what)
        if status >= 400:
            raise translate(status, parsed, what)
        return parsed

    async def _send(
        self, method: str, url: str, data: bytes | None, content_type: str, what: str
    ) -> tuple[int, Any]:
        headers = {"Accept": "application/json", **await self.tokens.header()}
        if data is not None:
            headers["Content-Type"] = content_type
        try:
            async with self._client().request(
                method, url, data=data, headers=headers, timeout=self._timeout
            ) as response:
                text = await response.read()
                return response.status, json.loads(text) if text else None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise KubeUnavailable(f"{what}: the API server did not answer: {exc!r}") from exc
        except ValueError as exc:
            raise KubeUnavailable(f"{what}: the answer is not JSON: {exc}") from exc

    def _res(self, resource: ResourceLike) -> Resource:
        return resolve(resource, self._extra)

    async def get(
        self,
        resource: ResourceLike,
        namespace: str,
        name: str,
        *,
        subresource: Subresource | None = None,
    ) -> KubeObject:
        result: KubeObject = await self._call(
            "GET", self._res(resource).path(namespace, name, subresource)
        )
        return result

    async def list(
        self,
        resource: ResourceLike,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ObjectList:
        res = self._res(resource)
        params = {"labelSelector": label_selector, "fieldSelector": field_selector}
        body = await self._call("GET", res.path(namespace), params=params)
        items = [{"apiVersion": res.api_version, "kind": res.kind, **i} for i in body["items"]]
        return ObjectList(items=items, resource_version=body["metadata"]["resourceVersion"])

    async def create(self, resource: ResourceLike, namespace: str, body: KubeObject) -> KubeObject:
        res = self._res(resource)
        full = {"apiVersion": res.api_version, "kind": res.kind, **body}
        result: KubeObject = await self._call("POST", res.path(namespace), body=full)
        return result

    async def replace(
        self,
        resource: ResourceLike,
        namespace: str,
        name: str,
        body: KubeObject,
        *,
        subresource: Subresource | None = None,
    ) -> KubeObject:
        res = self._res(resource)
        full = (
            body
            if subresource == "scale"
            else {"apiVersion": res.api_version, "kind": res.kind, **body}
        )
        result: KubeObject = await self._call(
            "PUT", res.path(namespace, name, subresource), body=full
        )
        return result

    async def patch(
        self,
        resource: ResourceLike,
        namespace: str,
        name: str,
        patch: KubeObject,
        *,
        subresource: Subresource | None = None,
    ) -> KubeObject:
        path = self._res(resource).path(namespace, name, subresource)
        result: KubeObject = await self._call(
            "PATCH", path, body=patch, content_type="application/merge-patch+json"
        )
        return result

    async def delete(
        self,
        resource: ResourceLike,
        namespace: str,
        name: str,
        *,
        propagation: Propagation | None = None,
        grace_period_seconds: int | None = None,
        resource_version: str | None = None,
    ) -> KubeObject:
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation is not None:
            options["propagationPolicy"] = propagation
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if resource_version is not None:
            options["preconditions"] = {"resourceVersion": resource_version}
        result: KubeObject = await self._call(
            "DELETE", self._res(resource).path(namespace, name), body=options
        )
        return result

    async def watch(
        self,
        resource: ResourceLike,
        namespace: str | None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: float | None = None,
    ) -> AsyncIterator[WatchEvent]:
        res = self._res(resource)
        params = {
            "watch": "1",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "timeoutSeconds": int(timeout_seconds) if timeout_seconds else None,
        }
        what = f"watch {res.path(namespace)}"
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._timeout.total)
        try:
            async with self._client().get(
                self._url(res.path(namespace), params),
                headers=await self.tokens.header(),
                timeout=timeout,
            ) as response:
                if response.status >= 400:
                    text = await response.read()
                    raise translate(response.status, json.loads(text) if text else None, what)
                buffer = b""
                async for chunk in response.content.iter_any():
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if line.strip():
                            yield _event(json.loads(line), what)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise KubeUnavailable(f"{what}: the stream failed: {exc!r}") from exc

    async def attach(
        self, namespace: str, pod: str, container: str, *, command: Command | None = None
    ) -> PodStream:
        params: dict[str, Any] = {"container": container, "stdin": "true", "stdout": "true"}
        params["stderr"] = "true"
        if command is not None:
            params["command"] = command
        sub = "exec" if command is not None else "attach"
        path = PODS.path(namespace, pod, sub)
        try:
            ws = await self._client().ws_connect(
                self._url(path, params),
                protocols=CHANNEL_PROTOCOLS,
                headers=await self.tokens.header(),
                max_msg_size=0,
                heartbeat=30.0,
            )
        except aiohttp.WSServerHandshakeError as exc:
            raise translate(exc.status, {"kind": "Status", "message": exc.message}, path) from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise KubeUnavailable(f"{sub} {path}: could not connect: {exc!r}") from exc
        return WebSocketPodStream(ws)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _event(raw: dict[str, Any], what: str) -> WatchEvent:
    if raw.get("type") == "ERROR":
        status = raw.get("object") or {}
        raise translate(int(status.get("code") or 500), status, what)
    return WatchEvent(type=raw["type"], object=raw["object"])
