"""Policy endpoints: the OpenAI-compatible client and envfarm's own loopback policy servers."""

from envfarm.policy.base import (
    Completion,
    PolicyClient,
    RetryRecord,
    SamplingParams,
    ToolCallRaw,
    parse_completion,
)
from envfarm.policy.builtin import BUILTIN_POLICIES, ORACLE_COMMAND, builtin_responder
from envfarm.policy.openai import OpenAIPolicy, normalize_base_url
from envfarm.policy.scripted import (
    ScriptedCompletion,
    ScriptedResponder,
    ScriptedToolCall,
    completion,
    tool_call,
)
from envfarm.policy.server import PolicyServer, Reply, Responder, completion_reply, error_reply

__all__ = [
    "BUILTIN_POLICIES",
    "ORACLE_COMMAND",
    "Completion",
    "OpenAIPolicy",
    "PolicyClient",
    "PolicyServer",
    "Reply",
    "Responder",
    "RetryRecord",
    "SamplingParams",
    "ScriptedCompletion",
    "ScriptedResponder",
    "ScriptedToolCall",
    "ToolCallRaw",
    "builtin_responder",
    "completion",
    "completion_reply",
    "error_reply",
    "normalize_base_url",
    "parse_completion",
    "tool_call",
]
