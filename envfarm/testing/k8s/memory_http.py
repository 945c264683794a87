"""The in-memory API served over HTTP in the API server's REST shapes, for ``rest.RestKubeApi``.

Paths ``/api/v1/...`` and ``/apis/GROUP/VERSION/...`` (namespaced or across namespaces),
lists as ``<Kind>List`` with items without ``apiVersion``/``kind`` (as the server sends them),
watches as a chunked stream of JSON lines ending in an ERROR event with a 410 ``Status`` when
the version is too old, merge patches only with ``application/merge-patch+json`` (415
otherwise), ``DeleteOptions`` bodies, failures as ``Status`` objects with their HTTP code, an
optional bearer token (401 without it), and ``pods/attach`` and ``pods/exec`` as WebSockets
speaking the ``v5.channel.k8s.io`` / ``v4.channel.k8s.io`` channel protocol.

    runner, url = await serve(api, token="t")   # http://127.0.0.1:PORT
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from aiohttp import WSMsgType, web

from envfarm.errors import KubeError
from envfarm.k8s.api import KNOWN, PODS, Resource
from envfarm.testing.k8s.memory import MemoryKubeApi

CHANNEL_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
MERGE_PATCH = "application/merge-patch+json"


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _failure(exc: KubeError) -> web.Response:
    code = exc.status or 500
    return web.json_response(status_body(code, exc.reason, str(exc)), status=code)


class MemoryApiServer:
    def __init__(self, api: MemoryKubeApi, token: str | None = None) -> None:
        self.api = api
        self.token = token

    def resource(self, api_version: str, plural: str) -> Resource:
        for found in [*KNOWN.values(), *self.api._extra.values()]:
            if found.api_version == api_version and found.plural == plural:
                return found
        raise KubeError(
            f"the server could not find the requested resource {plural} in {api_version}",
            status=404,
            reason="NotFound",
        )

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard], client_max_size=64 << 20)
        for prefix in ("/api/{version}", "/apis/{group}/{version}"):
            app.router.add_route("*", prefix + "/namespaces/{ns}/{plural}", self.collection)
            app.router.add_route("*", prefix + "/{plural}", self.collection)
            app.router.add_route("*", prefix + "/namespaces/{ns}/{plural}/{name}", self.item)
            app.router.add_route("*", prefix + "/namespaces/{ns}/{plural}/{name}/{sub}", self.item)
        return app

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.token and request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.json_response(status_body(401, "Unauthorized", "Unauthorized"), status=401)
        try:
            response: web.StreamResponse = await handler(request)
            return response
        except KubeError as exc:
            return _failure(exc)

    def _target(self, request: web.Request) -> tuple[Resource, str | None]:
        info = request.match_info
        group = info.get("group")
        api_version = f"{group}/{info['version']}" if group else info["version"]
        return self.resource(api_version, info["plural"]), info.get("ns")

    async def _body(self, request: web.Request) -> Any:
        text = await request.read()
        return json.loads(text) if text else {}

    async def collection(self, request: web.Request) -> web.StreamResponse:
        res, namespace = self._target(request)
        query = request.query
        if request.method == "POST" and namespace is not None:
            created = await self.api.create(res, namespace, await self._body(request))
            return web.json_response(created, status=201)
        if request.method != "GET":
            return web.json_response(status_body(405, "MethodNotAllowed", "no"), status=405)
        selectors = {
            "label_selector": query.get("labelSelector"),
            "field_selector": query.get("fieldSelector"),
        }
        if query.get("watch") in ("1", "true"):
            return await self._watch(request, res, namespace, selectors)
        listing = await self.api.list(res, namespace, **selectors)
        items = [
            {k: v for k, v in i.items() if k not in ("apiVersion", "kind")} for i in listing.items
        ]
        return web.json_response(
            {
                "apiVersion": res.api_version,
                "kind": f"{res.kind}List",
                "metadata": {"resourceVersion": listing.resource_version},
                "items": items,
            }
        )

    async def _watch(
        self, request: web.Request, res: Resource, namespace: str | None, selectors: dict[str, Any]
    ) -> web.StreamResponse:
        timeout = request.query.get("timeoutSeconds")
        stream = self.api.watch(
            res,
            namespace,
            resource_version=request.query.get("resourceVersion"),
            timeout_seconds=float(timeout) if timeout else None,
            **selectors,
        )
        try:
            first = await anext(stream)
        except StopAsyncIteration:
            first = None
        except KubeError as exc:
            return _failure(exc)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        try:
            if first is not None:
                await response.write(json.dumps(first.model_dump()).encode() + b"\n")
                async for event in stream:
                    await response.write(json.dumps(event.model_dump()).encode() + b"\n")
        except KubeError as exc:
            error = {
                "type": "ERROR",
                "object": status_body(exc.status or 500, exc.reason, str(exc)),
            }
            await response.write(json.dumps(error).encode() + b"\n")
        finally:
            await stream.aclose()
        await response.write_eof()
        return response

    async def item(self, request: web.Request) -> web.StreamResponse:
        res, namespace = self._target(request)
        assert namespace is not None
        name, sub = request.match_info["name"], request.match_info.get("sub")
        if sub in ("attach", "exec") and res == PODS:
            return await self._stream(request, namespace, name, sub)
        subresource: Any = sub
        if sub not in (None, "status", "scale"):
            return web.json_response(status_body(404, "NotFound", f"no {sub}"), status=404)
        if request.method == "GET":
            return web.json_response(
                await self.api.get(res, namespace, name, subresource=subresource)
            )
        if request.method == "PUT":
            body = await self._body(request)
            replaced = await self.api.replace(res, namespace, name, body, subresource=subresource)
            return web.json_response(replaced)
        if request.method == "PATCH":
            if request.content_type != MERGE_PATCH:
                message = f"the media type {request.content_type} is not supported here"
                return web.json_response(
                    status_body(415, "UnsupportedMediaType", message), status=415
                )
            patch = await self._body(request)
            patched = await self.api.patch(res, namespace, name, patch, subresource=subresource)
            return web.json_response(patched)
        if request.method == "DELETE":
            options = await self._body(request)
            deleted = await self.api.delete(
                res,
                namespace,
                name,
                propagation=options.get("propagationPolicy"),
                grace_period_seconds=options.get("gracePeriodSeconds"),
                resource_version=(options.get("preconditions") or {}).get("resourceVersion"),
            )
            return web.json_response(deleted)
        return web.json_response(status_body(405, "MethodNotAllowed", "no"), status=405)

    async def _stream(
        self, request: web.Request, namespace: str, name: str, sub: str
    ) -> web.StreamResponse:
        command = request.query.getall("command", []) if sub == "exec" else None
        container = request.query.get("container", "")
        stream = await self.api.attach(namespace, name, container, command=command or None)
        ws = web.WebSocketResponse(protocols=CHANNEL_PROTOCOLS, max_msg_size=0)
        await ws.prepare(request)

        async def outbound() -> None:
            while (piece := await stream.receive()) is not None:
                await ws.send_bytes(bytes([piece[0]]) + piece[1])
            await ws.send_bytes(b"\x03" + json.dumps({"status": "Success"}).encode())
            await ws.close()

        sender = asyncio.ensure_future(outbound())
        try:
            async for message in ws:
                if message.type != WSMsgType.BINARY or not message.data:
                    continue
                if message.data[0] == 0:
                    await stream.send(message.data[1:])
                elif message.data[0] == 255:
                    break  # v5: the client closed stdin
        finally:
            await stream.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await sender
            sender.cancel()
        return ws


async def serve(
    api: MemoryKubeApi, *, host: str = "127.0.0.1", port: int = 0, token: str | None = None
) -> tuple[web.AppRunner, str]:
    """Serve ``api`` on loopback; returns the runner (``await runner.cleanup()``) and URL."""
    runner = web.AppRunner(MemoryApiServer(api, token).app())
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    server = site._server
    assert server is not None
    sockets = getattr(server, "sockets", None) or []
    bound = sockets[0].getsockname()[1]
    return runner, f"http://{host}:{bound}"
