"""What the client raises: the server's problem as a typed error, or an unreachable server."""

from __future__ import annotations

from typing import Any

from envfarm.errors import EnvfarmError


class ApiError(EnvfarmError):
    """The server answered with an error: ``status`` and its RFC 9457 ``problem`` body."""

    def __init__(self, status: int | None, problem: dict[str, Any], method: str, url: str) -> None:
        self.status = status
        self.problem = problem
        self.method = method
        self.url = url
        detail = problem.get("detail") or problem.get("title") or "request failed"
        super().__init__(f"{method} {url}: {status or 'no answer'}: {detail}")

    @property
    def type(self) -> str:
        return str(self.problem.get("type", "about:blank"))

    @property
    def errors(self) -> list[dict[str, str]]:
        """On 422: each invalid ``field`` and its ``message``."""
        return list(self.problem.get("errors") or [])


class ApiConnectionError(ApiError):
    """The server could not be reached (or kept failing) for longer than the retry budget."""

    infrastructure = True
    retryable = True

    def __init__(self, method: str, url: str, reason: str) -> None:
        super().__init__(None, {"title": "unreachable", "detail": reason}, method, url)
