"""The run's setting for a verifier whose task says nothing about the network.

Harbor's default is ``public`` in both phases; envfarm's agent phase stays without a network (it
runs untrusted model output). The verifier's phase of a task that sets no network field follows
Harbor's default, ``public``, but only in a fresh container (``clean`` and ``separate`` modes):
no process the agent left can use that network. A ``shared`` verifier runs in the agent's
container and stays without a network unless the task asks. ``ENVFARM_VERIFIER_NETWORK=none``
(``--verifier-network none`` on ``run`` and ``check``) keeps every unset verifier without a
network, as envfarm did before.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal, cast, get_args

from envfarm.errors import TaskSpecError

VerifierNetworkDefault = Literal["task-default", "none"]
CHOICES: tuple[str, ...] = get_args(VerifierNetworkDefault)
VERIFIER_NETWORK_ENV = "ENVFARM_VERIFIER_NETWORK"


def verifier_network_default(env: Mapping[str, str] | None = None) -> VerifierNetworkDefault:
    """The run's choice: ``task-default`` (Harbor's public, in a fresh container) or ``none``."""
    env = os.environ if env is None else env
    value = env.get(VERIFIER_NETWORK_ENV, "").strip().lower() or "task-default"
    if value not in CHOICES:
        raise TaskSpecError(
            VERIFIER_NETWORK_ENV, f"expected one of {', '.join(CHOICES)}, got {value!r}"
        )
    return cast(VerifierNetworkDefault, value)


def set_verifier_network_default(value: VerifierNetworkDefault) -> None:
    """What ``--verifier-network`` does: for this process and every process it starts."""
    os.environ[VERIFIER_NETWORK_ENV] = value
