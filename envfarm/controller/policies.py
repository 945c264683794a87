"""Resolving ``--policy`` into a running ``PolicyClient``.

The built-in policies (``oracle``, ``nop``) are served by envfarm itself over real HTTP on
loopback and reached through the same OpenAI-compatible client as a real model, so the whole
path (request, tool-call parsing, retries) is exercised even with no model at hand.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, SecretStr

from envfarm.policy.base import PolicyClient
from envfarm.policy.builtin import BUILTIN_POLICIES, builtin_responder
from envfarm.policy.openai import OpenAIPolicy
from envfarm.policy.server import PolicyServer


class PolicySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: str
    """``oracle``, ``nop`` or the base URL of an OpenAI-compatible endpoint."""
    model: str | None = None
    api_key: SecretStr | None = None

    @property
    def builtin(self) -> bool:
        return self.target in BUILTIN_POLICIES

    @property
    def model_name(self) -> str:
        return self.model or (self.target if self.builtin else "default")


@dataclass
class ResolvedPolicy:
    client: PolicyClient
    name: str
    model: str
    needs_solution: bool
    """True for the oracle: the task's solution is uploaded to /solution before the agent runs."""


@asynccontextmanager
async def open_policy(spec: PolicySpec) -> AsyncIterator[ResolvedPolicy]:
    if spec.builtin:
        async with PolicyServer(builtin_responder(spec.target), model_names=[spec.target]) as srv:
            client = OpenAIPolicy(srv.base_url, spec.target)
            try:
                yield ResolvedPolicy(client, spec.target, spec.target, spec.target == "oracle")
            finally:
                await client.aclose()
        return
    key = spec.api_key.get_secret_value() if spec.api_key else None
    client = OpenAIPolicy(spec.target, spec.model_name, api_key=key)
    try:
        yield ResolvedPolicy(client, spec.target, spec.model_name, needs_solution=False)
    finally:
        await client.aclose()
