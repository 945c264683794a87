"""The run's setting for a verifier whose task says nothing about the network.

Harbor's default is ``public`` in both phases; envfarm's agent phase stays without a network (it
runs untrusted model output). The verifier's phase of a task that sets no network field follows
Harbor's default, ``public``, but only in a fresh container (``clean`` and ``separate`` modes):
no process the agent left can use that network. A ``shared`` verifier runs in the agent's
container and stays without a network unless the task asks. ``ENVFARM_VERIFIER_NETWORK=none``
(``--verifier-network none`` on ``run``, ``check`` and ``serve``, ``verifier_network`` on a job)
keeps every unset verifier without a network, as envfarm did before. The episode's plan decides
(``envfarm/plan/planner.py``); the variable is read by ``envfarm.settings``.
"""

from __future__ import annotations

from collections.abc import Mapping

from envfarm.settings import VERIFIER_NETWORK_CHOICES, VERIFIER_NETWORK_ENV, Settings
from envfarm.settings import VerifierNetworkDefault as VerifierNetworkDefault

CHOICES = VERIFIER_NETWORK_CHOICES
__all__ = ["CHOICES", "VERIFIER_NETWORK_ENV", "VerifierNetworkDefault", "verifier_network_default"]


def verifier_network_default(env: Mapping[str, str] | None = None) -> VerifierNetworkDefault:
    """The environment's choice: ``task-default`` (Harbor's public, in a fresh container) or
    ``none``."""
    return Settings.from_env(env).verifier_network
