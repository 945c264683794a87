"""Policy endpoints: the OpenAI-compatible client and envfarm's own loopback policy
server for the built-in policies. Scripted and fake-vLLM servers for tests: ``envfarm.testing``."""

from envfarm.policy.base import (
    Completion,
    PolicyClient,
    RetryRecord,
    SamplingParams,
    ToolCallRaw,
    parse_completion,
)
from envfarm.policy.builtin import BUILTIN_POLICIES, ORACLE_COMMAND, builtin_responder
from envfarm.policy.endpoints import EndpointSpec, EndpointStatus, PoolSettings
from envfarm.policy.openai import OpenAIPolicy, normalize_base_url
from envfarm.policy.pool import EndpointPool, PoolSession
from envfarm.policy.profiles import CaptureOptions, ServerProfile, TokenCapture
from envfarm.policy.server import PolicyServer, Reply, Responder, completion_reply, error_reply
from envfarm.policy.tokens import TokenData, read_tokens

__all__ = [
    "BUILTIN_POLICIES",
    "ORACLE_COMMAND",
    "CaptureOptions",
    "Completion",
    "EndpointPool",
    "EndpointSpec",
    "EndpointStatus",
    "OpenAIPolicy",
    "PolicyClient",
    "PolicyServer",
    "PoolSession",
    "PoolSettings",
    "Reply",
    "Responder",
    "RetryRecord",
    "SamplingParams",
    "ServerProfile",
    "TokenCapture",
    "TokenData",
    "ToolCallRaw",
    "builtin_responder",
    "completion_reply",
    "error_reply",
    "normalize_base_url",
    "parse_completion",
    "read_tokens",
]
