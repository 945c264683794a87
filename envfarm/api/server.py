"""Running the API inside an event loop that also runs other things (the worker, a test).

uvicorn's ``Server`` is used without its signal capture: the caller owns SIGTERM/SIGINT and
decides the order of shutdown (stop taking requests, then stop the worker, then close the
store); uvicorn would instead re-raise the signal after its own shutdown and kill the process
before the worker has finished. The listening socket is bound here, so a busy port is an
``ApiServerError`` naming the address rather than uvicorn exiting the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Generator
from types import TracebackType

import uvicorn
from starlette.types import ASGIApp

from envfarm.errors import EnvfarmError

DEFAULT_GRACEFUL_S = 5


class ApiServerError(EnvfarmError):
    """The API could not listen on the address it was given."""


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class ApiServer:
    """``async with ApiServer(app, port=0) as server: ... server.url``."""

    def __init__(
        self,
        app: ASGIApp,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        graceful_s: int = DEFAULT_GRACEFUL_S,
        log_level: str = "warning",
        access_log: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            lifespan="off",
            log_level=log_level,
            access_log=access_log,
            timeout_graceful_shutdown=graceful_s,
        )
        if access_log:  # uvicorn's loggers take ``log_level``; requests are logged at INFO
            for name in ("uvicorn.access", "uvicorn.error"):  # WebSocket handshakes: .error
                logging.getLogger(name).setLevel(logging.INFO)
        self._server = _Server(config)
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        sock = listening_socket(self.host, self.port)
        self.port = sock.getsockname()[1]
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise ApiServerError(f"the API on {self.url} stopped while starting")
            await asyncio.sleep(0.01)

    def stop(self) -> None:
        """Stop accepting requests; in-flight ones get ``graceful_s`` seconds to finish."""
        self._server.should_exit = True

    async def wait(self) -> None:
        if self._task is not None:
            await self._task

    async def __aenter__(self) -> ApiServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        await self.wait()


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to the address (port 0: any free one), for uvicorn to listen on.

    Its protocol is named ``IPPROTO_TCP`` rather than left 0: asyncio turns Nagle's algorithm
    off only on connections whose socket says TCP, and with it on, an answer written as headers
    then body waited for the client's delayed acknowledgement, 40 ms a request."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ApiServerError(f"cannot listen on {host}:{port}: {exc}") from exc
    sock.set_inheritable(True)
    return sock
