"""The address pool of environment networks (pure: reads the environment, no Docker)."""

from __future__ import annotations

import ipaddress

import pytest

from envfarm.errors import SandboxStartError
from envfarm.sandbox.docker.networks import (
    DEFAULT_POOL,
    DEFAULT_PREFIX,
    POOL_VARIABLE,
    PREFIX_VARIABLE,
    subnet_pool,
)


def test_the_default_pool_holds_thousands_of_networks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(POOL_VARIABLE, raising=False)
    monkeypatch.delenv(PREFIX_VARIABLE, raising=False)
    pool, prefix = subnet_pool()
    assert (str(pool), prefix) == (DEFAULT_POOL, DEFAULT_PREFIX)
    assert len(list(pool.subnets(new_prefix=prefix))) >= 1000
    assert not pool.overlaps(ipaddress.IPv4Network("172.16.0.0/12"))  # Docker's own pools
    assert not pool.overlaps(ipaddress.IPv4Network("192.168.0.0/16"))


def test_the_pool_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(POOL_VARIABLE, "10.123.0.0/16")
    monkeypatch.setenv(PREFIX_VARIABLE, "28")
    assert subnet_pool() == (ipaddress.IPv4Network("10.123.0.0/16"), 28)


@pytest.mark.parametrize(
    ("pool", "prefix", "words"),
    [
        ("not-a-network", "27", POOL_VARIABLE),
        ("10.0.0.1/16", "27", "host bits"),
        ("10.0.0.0/16", "many", PREFIX_VARIABLE),
        ("10.0.0.0/16", "12", "between"),
        ("10.0.0.0/16", "30", "between"),
    ],
)
def test_a_bad_pool_is_a_clear_start_error(
    monkeypatch: pytest.MonkeyPatch, pool: str, prefix: str, words: str
) -> None:
    monkeypatch.setenv(POOL_VARIABLE, pool)
    monkeypatch.setenv(PREFIX_VARIABLE, prefix)
    with pytest.raises(SandboxStartError, match=words):
        subnet_pool()
