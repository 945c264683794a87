"""One internal network per environment, from a pool of small subnets.

Docker's default address pools hand out about thirty networks (/16 and /20 blocks), so envfarm
gives each environment network an explicit small subnet instead: a /27 (29 containers) from
``ENVFARM_NETWORK_POOL`` (default ``198.18.0.0/15``, the block reserved for network benchmark
tests, which no real network uses): 4096 networks. ``ENVFARM_NETWORK_PREFIX`` changes the
size. A subnet is picked at random among those no network uses; the engine rejects overlaps
atomically, so concurrent processes that pick the same one just retry.

An environment's network is ``--internal`` (no traffic leaves it) and ``inhibit_ipv4`` (the host
takes no address on it, so a sandbox cannot reach services listening on the host either).
Docker still gives its containers a default route to the absent gateway; for a main container
without network access the helper removes it as it starts where it safely can (``create.py``,
``images/sandboxd/route.c``), else ``drop_default_route`` does, from a throwaway container that
shares only its network namespace and holds only ``NET_ADMIN``, so the sandbox's routing table
shows the environment's subnet and nothing else.

A task whose phases differ in network access (``network_mode`` of ``[agent]`` and
``[verifier]``) gets the default bridge joined or left between the phases, on a running
container: a main container without an environment network is created on the bridge and, when
the agent phase has no network, leaves it before it starts (only loopback is left); in an
environment, leaving the bridge brings back the environment network's default route, which is
removed again. The environment network, and so the sidecars, stay reachable throughout.

Sidecars that may reach out (``services.py``) share a second network of the environment's, from
the same pool, that is not internal but on which containers cannot reach one another: it leads
outside and nowhere else, never to another environment (the default bridge would: its
containers talk freely). The copies of a forked group share one (``fork.py``): one network
create instead of one per copy, and still no copy reaches another on it. The main container
never joins it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import random
from typing import Any

import docker.errors
from docker.types import IPAMConfig, IPAMPool

from envfarm.errors import SandboxError, SandboxStartError
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.containers import remove_in_background
from envfarm.settings import (
    DEFAULT_NETWORK_POOL,
    DEFAULT_NETWORK_PREFIX,
    NETWORK_POOL_ENV,
    NETWORK_PREFIX_ENV,
    current,
)

POOL_VARIABLE = NETWORK_POOL_ENV
PREFIX_VARIABLE = NETWORK_PREFIX_ENV
DEFAULT_POOL = DEFAULT_NETWORK_POOL
DEFAULT_PREFIX = DEFAULT_NETWORK_PREFIX
ATTEMPTS = 32
DEFAULT_BRIDGE = "bridge"

# RTM_DELROUTE of every IPv4 default route of the main table, through a raw netlink socket
# (perl is essential in Debian, so every envfarm image has it; iproute2 is not).
_DROP_ROUTE = r"""
use strict;
socket(my $s, 16, 3, 0) or die "socket: $!\n";
for my $seq (1 .. 8) {
    my $rt = pack("CCCCCCCCL", 2, 0, 0, 0, 254, 0, 255, 0, 0);
    my $msg = pack("LSSLL", 16 + length($rt), 25, 5, $seq, 0) . $rt;
    send($s, $msg, 0, pack("SSLL", 16, 0, 0, 0)) or die "send: $!\n";
    defined(recv($s, my $buf, 4096, 0)) or die "recv: $!\n";
    my ($type, $err) = (unpack("x4S", $buf), unpack("x16l", $buf));
    die "unexpected netlink reply $type\n" unless $type == 2;
    exit 0 if $err == -3;
    die "netlink error $err\n" if $err != 0;
}
die "default routes keep coming back\n";
"""


def subnet_pool() -> tuple[ipaddress.IPv4Network, int]:
    """``ENVFARM_NETWORK_POOL`` and ``ENVFARM_NETWORK_PREFIX`` (read by ``envfarm.settings``)."""
    settings = current()
    return settings.network_pool, settings.network_prefix


def _used_subnets() -> list[ipaddress.IPv4Network]:
    used = []
    for network in docker_client().api.networks():
        for config in (network.get("IPAM") or {}).get("Config") or []:
            with contextlib.suppress(ValueError, TypeError):
                subnet = ipaddress.ip_network(config.get("Subnet", ""), strict=False)
                if isinstance(subnet, ipaddress.IPv4Network):
                    used.append(subnet)
    return used


def _pick(pool: ipaddress.IPv4Network, prefix: int) -> ipaddress.IPv4Network | None:
    size = 1 << (32 - prefix)
    count = pool.num_addresses // size
    used = [subnet for subnet in _used_subnets() if subnet.overlaps(pool)]
    base = int(pool.network_address)
    random_tries = [random.randrange(count) for _ in range(64)]
    for index in [*random_tries, *range(count)]:  # random first; a full scan when crowded
        candidate = ipaddress.IPv4Network((base + index * size, prefix))
        if not any(candidate.overlaps(subnet) for subnet in used):
            return candidate
    return None


def create_network(name: str, labels: dict[str, str], *, outbound: bool = False) -> str:
    """Create the internal network ``name``; return its id. Blocking.

    ``outbound``: a network that leads out instead (the sidecars', ``services.py``), on which
    its containers cannot reach one another (``enable_icc`` false): they meet on the internal
    network, and this one only takes them outside."""
    options = (
        {"com.docker.network.bridge.enable_icc": "false"}
        if outbound
        else {"com.docker.network.bridge.inhibit_ipv4": "true"}
    )
    pool, prefix = subnet_pool()
    api = docker_client().api
    for _ in range(ATTEMPTS):
        subnet = _pick(pool, prefix)
        if subnet is None:
            break
        try:
            created = api.create_network(
                name,
                driver="bridge",
                internal=not outbound,
                ipam=IPAMConfig(pool_configs=[IPAMPool(subnet=str(subnet))]),
                options=options,
                labels=labels,
                check_duplicate=True,
            )
        except docker.errors.APIError as exc:
            if "overlap" in str(exc).lower():
                continue
            raise SandboxStartError(f"could not create network {name}: {exc}") from exc
        return str(created["Id"])
    raise SandboxStartError(
        f"no free /{prefix} subnet left in {pool} for network {name}: widen {POOL_VARIABLE}, "
        f"or remove networks left behind by dead runs (envfarm gc)"
    )


def remove_network(network_id: str) -> None:
    """Remove a network, first disconnecting whatever is still attached. Blocking."""
    api = docker_client().api
    try:
        details = api.inspect_network(network_id)
        for container_id in details.get("Containers") or {}:
            with contextlib.suppress(docker.errors.NotFound):
                api.disconnect_container_from_network(container_id, network_id, force=True)
        api.remove_network(network_id)
    except docker.errors.NotFound:
        return
    except docker.errors.APIError as exc:
        raise SandboxError(f"could not remove network {network_id[:12]}: {exc}") from exc


def forget_endpoints(network: str, containers: list[str]) -> None:
    """Force the endpoints of these (removed) containers off ``network``, best effort (the
    network's removal says if one is left). Blocking."""
    api = docker_client().api
    for name in containers:
        with contextlib.suppress(Exception):
            api.disconnect_container_from_network(name, network, force=True)


def bridge_gateway() -> str:
    """The host's address on the default bridge (its ``Gateway``, else the subnet's first
    address: some engines leave the gateway out of the bridge's IPAM config)."""
    config = docker_client().api.inspect_network("bridge")["IPAM"]["Config"][0]
    if config.get("Gateway"):
        return str(config["Gateway"])
    return str(next(ipaddress.ip_network(config["Subnet"]).hosts()))


def network_options(network: bool, name: str | None, aliases: list[str]) -> dict[str, Any]:
    """``containers.create`` arguments: the environment network with its aliases, or the
    default bridge / no network at all."""
    if name is None:
        return {"network_mode": DEFAULT_BRIDGE if network else "none"}
    endpoint = docker_client().api.create_endpoint_config(aliases=aliases)
    return {"network": name, "networking_config": {name: endpoint}}


def join_default_bridge(container_id: str) -> None:
    """Also attach a container to the default bridge (the task asked for network)."""
    docker_client().api.connect_container_to_network(container_id, DEFAULT_BRIDGE)


def leave_default_bridge(container_id: str) -> None:
    """Detach a container from the default bridge (created or running)."""
    docker_client().api.disconnect_container_from_network(container_id, DEFAULT_BRIDGE, force=True)


def switch_default_bridge(container_id: str, joined: bool) -> None:
    """Join or leave the default bridge between two phases of an episode. Blocking."""
    try:
        (join_default_bridge if joined else leave_default_bridge)(container_id)
    except docker.errors.DockerException as exc:
        what = "give" if joined else "take away"
        raise SandboxError(f"could not {what} the verifier phase's network: {exc}") from exc


def switch_default_bridge_from_none(container_id: str, joined: bool) -> None:
    """``switch_default_bridge`` for a container, running or stopped, which may have been
    created without a network (``none``: a sandbox whose agent has none, whose verifier has
    the bridge), which it leaves first. Blocking."""
    if joined:
        api = docker_client().api
        try:
            networks = api.inspect_container(container_id)["NetworkSettings"]["Networks"] or {}
            if "none" in networks:
                api.disconnect_container_from_network(container_id, "none")
        except docker.errors.DockerException as exc:
            raise SandboxError(f"could not give the verifier phase's network: {exc}") from exc
    switch_default_bridge(container_id, joined)


def drop_default_route(
    container_id: str, helper_image: str, labels: dict[str, str], *, keep: bool = False
) -> str:
    """Remove the IPv4 default route(s) in the running container's network namespace; the
    helper container's id.

    The exited helper is removed on a thread of its own, off the environment's start (a
    removal takes the engine 0.4-1.2 s), or (``keep``) left for the caller to remove once the
    environment is up: the main container can be removed while it exists, and it carries the
    environment's labels, so the environment's teardown sweeps it (and the reaper, after a
    crash) if nothing else has."""
    client = docker_client()
    helper = client.containers.create(
        helper_image,
        command=["perl", "-e", _DROP_ROUTE],
        entrypoint=[],
        user="0:0",
        network_mode=f"container:{container_id}",
        cap_drop=["ALL"],
        cap_add=["NET_ADMIN"],
        security_opt=["no-new-privileges"],
        mem_limit="64m",
        pids_limit=16,
        labels=labels,
    )
    try:
        helper.start()
        status = helper.wait(timeout=60)
        output = helper.logs().decode(errors="replace").strip()
    except docker.errors.DockerException as exc:
        raise SandboxStartError(f"could not remove the main container's route: {exc}") from exc
    finally:
        if not keep:
            remove_in_background(helper)
    if status.get("StatusCode") != 0:
        raise SandboxStartError(
            f"could not remove the main container's default route (exit "
            f"{status.get('StatusCode')}): {output or 'no output'}"
        )
    return str(helper.id)
