"""Opening a PostgreSQL store waits while the server is not taking connections yet, and only
then: what counts as "not yet" is read from the driver's message."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from envfarm.store.engine import wait_for_server


class Refusing:
    """An engine whose first connections fail with ``message``."""

    def __init__(self, message: str, failures: int) -> None:
        self.message, self.failures, self.attempts = message, failures, 0

    def connect(self) -> Any:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise OperationalError("connect", {}, Exception(self.message))
        return _Connection()


class _Connection:
    def __enter__(self) -> _Connection:
        return self

    def __exit__(self, *_: object) -> None:
        return None


@pytest.mark.parametrize(
    "message",
    [
        "connection refused",
        # a Kubernetes Service whose pods are not ready yet: its name does not resolve
        "failed to resolve host 'db.ns.svc': [Errno -3] Temporary failure in name resolution",
    ],
)
def test_a_server_not_up_yet_is_waited_for(message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "sleep", lambda _: None)
    engine = Refusing(message, failures=3)
    wait_for_server(engine, "db")  # type: ignore[arg-type]
    assert engine.attempts == 4


def test_any_other_refusal_is_raised_at_once() -> None:
    engine = Refusing('password authentication failed for user "envfarm"', failures=1)
    with pytest.raises(OperationalError):
        wait_for_server(engine, "db")  # type: ignore[arg-type]
    assert engine.attempts == 1
