"""Resolving ``--policy`` into a running ``PolicyClient``.

The built-in policies (``oracle``, ``nop``) are served by envfarm itself over real HTTP on
loopback and reached through the same OpenAI-compatible client as a real model, so the whole
path (request, tool-call parsing, retries) is exercised even with no model at hand. Endpoint
URLs, one or several, are served through an ``EndpointPool``: even a single endpoint needs its
weight-swap pause handling and breaker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from pydantic import Field, model_validator

from envfarm.controller.versions import PolicyVersionBoard
from envfarm.errors import PolicyConfigError
from envfarm.grading.rubric.judges import RubricJudge
from envfarm.models.jobs import JobPolicy, JudgeRequest
from envfarm.policy.base import Completion, PolicyClient, SamplingParams
from envfarm.policy.builtin import BUILTIN_POLICIES, builtin_responder
from envfarm.policy.endpoints import EndpointSpec, PoolSettings
from envfarm.policy.openai import OpenAIPolicy
from envfarm.policy.pool import EndpointPool
from envfarm.policy.profiles import DEFAULT_VERSION_HEADER, CaptureOptions
from envfarm.policy.server import PolicyServer
from envfarm.policy.server_api import TokenizerRenderer


class PolicySpec(JobPolicy):
    """A job's policy (``JobPolicy``) with what this process adds to serve it: the endpoint
    pool's retries and breaker, and the header that carries the policy version."""

    pool: PoolSettings = Field(default_factory=PoolSettings)
    """Retries, circuit breaker and pause budgets of the endpoint pool (URLs only)."""
    version_header: str | None = DEFAULT_VERSION_HEADER
    """Response header that carries the policy version; None to ignore headers."""

    def capture(self) -> CaptureOptions:
        """Token capture options for this policy's endpoint clients."""
        return CaptureOptions(
            profile=self.server_profile,
            routed_experts=self.routed_experts,
            version_header=self.version_header,
        )

    @model_validator(mode="after")
    def _urls_in_a_pool(self) -> PolicySpec:
        for endpoint in self.endpoints:
            if endpoint.url in BUILTIN_POLICIES:
                raise ValueError(
                    f"the built-in policy {endpoint.url!r} cannot be part of an endpoint pool; "
                    "pool endpoints are URLs"
                )
        return self

    @property
    def label(self) -> str:
        """``base_url``, or the pool's URLs joined by commas."""
        return self.base_url or ", ".join(e.url for e in self.endpoints)

    @property
    def pool_endpoints(self) -> list[EndpointSpec]:
        return self.endpoints or [EndpointSpec(url=self.base_url)]

    @property
    def builtin(self) -> bool:
        return self.base_url in BUILTIN_POLICIES

    @property
    def model_name(self) -> str:
        named = self.builtin or self.base_url == DRIVEN_POLICY
        return self.model or (self.base_url if named else "default")


def policy_fields(values: Sequence[str]) -> dict[str, Any]:
    """``JobPolicy`` fields from repeated ``--policy`` values: ``oracle``, ``nop``, or URLs,
    each optionally followed by ``=WEIGHT`` (``http://a:8000/v1 http://b:8000/v1=2``)."""
    if len(values) == 1 and "=" not in values[0]:
        return {"base_url": values[0]}
    endpoints: list[dict[str, Any]] = []
    for value in values:
        if value in BUILTIN_POLICIES:
            raise ValueError(
                f"--policy {value} cannot be combined with other --policy values: "
                "several --policy values make a pool of endpoint URLs"
            )
        url, sep, weight = value.rpartition("=")
        if not sep:
            endpoints.append({"url": value})
            continue
        try:
            parsed = float(weight)
        except ValueError:
            parsed = 0.0
        if not url or not 0 < parsed < float("inf"):
            raise ValueError(
                f"--policy {value!r}: expected URL or URL=WEIGHT with a positive weight, "
                "e.g. http://host:8000/v1=2"
            )
        endpoints.append({"url": url, "weight": parsed})
    return {"endpoints": endpoints}


@dataclass
class ResolvedPolicy:
    client: PolicyClient
    name: str
    model: str
    needs_solution: bool
    """True for the oracle: the task's solution is uploaded to /solution before the agent runs."""
    versions: PolicyVersionBoard | None = None
    """The versions the trainer published (None in CLI runs): orders ``policy_versions``."""


DRIVEN_POLICY = "driven"
"""The policy of a driven session's job: its trainer sends the actions (``agent/driven.py``).
Only the step API opens such jobs; ``POST /v1/jobs`` refuses it."""


class DrivenPolicy(PolicyClient):
    """Nothing to ask: a driven episode never calls its policy."""

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: SamplingParams
    ) -> Completion:
        raise PolicyConfigError("a driven session's actions come from its trainer, not a policy")


@asynccontextmanager
async def open_policy(
    spec: PolicySpec, versions: PolicyVersionBoard | None = None
) -> AsyncIterator[ResolvedPolicy]:
    if spec.base_url == DRIVEN_POLICY:
        yield ResolvedPolicy(DrivenPolicy(), DRIVEN_POLICY, spec.model_name, False, versions)
        return
    if spec.builtin:
        name = spec.base_url
        async with PolicyServer(builtin_responder(name), model_names=[name]) as srv:
            client = OpenAIPolicy(srv.base_url, name)
            try:
                yield ResolvedPolicy(client, name, name, name == "oracle")
            finally:
                await client.aclose()
        return
    key = spec.api_key.get_secret_value() if spec.api_key else None
    pool = EndpointPool(
        spec.pool_endpoints,
        spec.model_name,
        api_key=key,
        settings=spec.pool,
        capture=spec.capture(),
        version_source=versions.latest if versions else None,
        token_mode=spec.token_mode,
        renderer=TokenizerRenderer(spec.tokenizer) if spec.tokenizer else None,
        tool_parser=spec.tool_parser,
    )
    try:
        if spec.token_mode:
            await pool.preflight(token_mode=True)
        yield ResolvedPolicy(
            pool, spec.label, spec.model_name, needs_solution=False, versions=versions
        )
    finally:
        await pool.aclose()


class JudgeSpec(JudgeRequest):
    """The rubric judge endpoint (``--judge``, a job's ``judge``), with how this process asks it."""

    verdict_retries: int = Field(default=2, ge=0)
    """Corrective retries after a reply that is not a readable verdict."""
    concurrency: int = Field(default=16, ge=1)
    """Judge requests in flight at once, across every episode."""


@asynccontextmanager
async def open_judge(spec: JudgeSpec | None) -> AsyncIterator[RubricJudge | None]:
    """A ``RubricJudge`` on ``spec``'s endpoint (None without a spec); closed on exit."""
    if spec is None:
        yield None
        return
    key = spec.api_key.get_secret_value() if spec.api_key else None
    client = OpenAIPolicy(spec.base_url, spec.model, api_key=key)
    try:
        yield RubricJudge(
            client,
            endpoint=client.base_url,
            model=spec.model,
            verdict_retries=spec.verdict_retries,
            concurrency=spec.concurrency,
        )
    finally:
        await client.aclose()
