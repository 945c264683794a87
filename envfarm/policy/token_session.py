"""Token-in/token-out mode: one session's context kept as token ids.

The agent still speaks messages (``PolicyClient.complete``); this client turns them into ids so
that every prompt of a context extends the previous one by construction:

    prompt(k+1) = prompt(k) + completion(k) + [end] + rendered(new messages)

- ``completion(k)``: exactly the ids the model sampled (never the template's re-rendering of
  the parsed message, which differs: whitespace, key order, a cut-off tool call);
- ``end``: the template's end-of-message token (Qwen: ``<|im_end|>``), unless the model sampled
  it as its last token (a completion cut at ``max_tokens`` did not);
- ``rendered(new messages)``: what the template renders after that token when the history is
  rendered with the new messages and the generation prompt. The history up to the last prompt
  is rendered too, to find where the assistant message begins; both renders end in a
  non-assistant message, since servers continue a final assistant message as a prefill.

The first prompt of a context (and any history that does not extend the last one, e.g. after a
summary restarted the context) is rendered whole. Rendering goes through the server's template
(llama.cpp ``/apply-template`` + ``/tokenize``, vLLM ``/tokenize``; through the pool, so a
restarting server is waited for as its completions are: ``PoolRenderer``) or a tokenizer the
user names (``server_api``). Tool calls are parsed from the sampled text (``toolparse``), since no
server parses text it did not render.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from envfarm.errors import PolicyConfigError, PolicyError
from envfarm.policy.base import Completion, PolicyClient, SamplingParams, ToolCallRaw
from envfarm.policy.openai import OpenAIPolicy
from envfarm.policy.server_api import LlamaCppRenderer, Renderer, VLLMRenderer
from envfarm.policy.toolparse import ToolParser, parse_tool_calls

if TYPE_CHECKING:
    from envfarm.policy.pool import EndpointPool

SENTINEL = "envfarm-closing-probe"


def server_renderer(client: OpenAIPolicy) -> Renderer:
    """The renderer of the server behind ``client`` (its profile must be settled)."""
    profile = client.tokens.profile
    if profile == "llamacpp":
        return LlamaCppRenderer(client)
    if profile == "vllm":
        return VLLMRenderer(client)
    raise PolicyConfigError(
        f"token mode on {client.base_url} ({profile}) needs --tokenizer: the server has no "
        "endpoint that renders the chat template into ids"
    )


class PoolRenderer(Renderer):
    """The server's own template (``server_renderer``), reached through an ``EndpointPool``:
    each request goes to the endpoint the session is bound to, with the pool's retries and
    outage handling (``EndpointPool.side_request``)."""

    def __init__(self, pool: EndpointPool, session: str, name: str) -> None:
        self.pool, self.session, self.name = pool, session, name

    async def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, generation: bool
    ) -> list[int]:
        async def on(client: OpenAIPolicy) -> list[int]:
            await client.prepare()
            return await server_renderer(client).render(messages, tools, generation=generation)

        return await self.pool.side_request(self.session, on)

    async def tokenize(self, text: str) -> list[int]:
        async def on(client: OpenAIPolicy) -> list[int]:
            await client.prepare()
            return await server_renderer(client).tokenize(text)

        return await self.pool.side_request(self.session, on)


class TokenSession(PolicyClient):
    """One agent session in token mode (see the module docstring)."""

    def __init__(
        self,
        generate: Callable[[list[int], SamplingParams], Any],
        renderer: Callable[[], Awaitable[Renderer]],
        *,
        tool_parser: ToolParser = "auto",
        key: str = "session",
    ) -> None:
        self._generate = generate
        self._renderer = renderer
        self.tool_parser = tool_parser
        self.key = key
        self._messages: list[dict[str, Any]] = []
        """The history of the last call followed by the assistant message it produced."""
        self._context: list[int] | None = None
        """The last prompt followed by the sampled completion."""
        self._end: int | None = None
        self._calls = 0

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        sampling: SamplingParams,
    ) -> Completion:
        renderer = await self._renderer()
        prompt, warnings = await self._prompt(renderer, messages, tools)
        completion: Completion = await self._generate(prompt, sampling)
        tokens = completion.tokens
        text = completion.content or ""
        calls: list[ToolCallRaw]
        if sampling.tool_choice == "none":
            content, calls = (text or None), []
        else:
            content, calls = parse_tool_calls(text, self.tool_parser, prefix=f"call_{self._calls}")
        self._calls += 1
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in calls
            ]
        completion.content, completion.tool_calls, completion.message = content, calls, message
        completion.warnings += warnings
        sampled = tokens.completion_token_ids if tokens is not None else None
        if tokens is not None:
            tokens.completion_text = text
        if sampled is None or (tokens is not None and tokens.faults):
            self._messages, self._context = [], None
        else:
            self._messages, self._context = [*messages, message], prompt + sampled
        return completion

    async def _prompt(
        self, renderer: Renderer, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> tuple[list[int], list[str]]:
        covered = len(self._messages)
        context = self._context
        extends = (
            context is not None
            and covered
            and len(messages) > covered
            and messages[: covered - 1] == self._messages[: covered - 1]
            and messages[covered - 1].get("role") == "assistant"
        )
        if not extends or context is None:
            return await renderer.render(messages, tools, generation=True), []
        # Both renders end in a non-assistant message: servers take a final assistant message
        # as a prefill to continue (llama.cpp refuses one that has tool calls).
        last_prompt = await renderer.render(messages[: covered - 1], tools, generation=True)
        whole = await renderer.render(messages, tools, generation=True)
        end = await self._end_token(renderer)
        start = len(last_prompt)
        cut = next((i for i in range(start, len(whole)) if whole[i] == end), None)
        if whole[:start] != last_prompt or cut is None:
            return whole, [
                "the chat template is not append-only for this history: the prompt was "
                "rendered whole, so it does not extend the previous one"
            ]
        glue = [] if context and context[-1] == end else [end]
        return context + glue + whole[cut + 1 :], []

    async def _end_token(self, renderer: Renderer) -> int:
        """The token that ends an assistant message in the template (Qwen: ``<|im_end|>``),
        found once per session: the token after a probe message's content."""
        if self._end is None:
            probe = [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": SENTINEL},
                {"role": "user", "content": "again"},
            ]
            rendered = await renderer.render(probe, [], generation=False)
            marker = await renderer.tokenize(SENTINEL)
            for start in range(len(rendered) - len(marker) - 1, -1, -1):
                if rendered[start : start + len(marker)] == marker:
                    self._end = rendered[start + len(marker)]
                    break
            else:
                raise PolicyError(
                    f"token mode: cannot find where the chat template ends an assistant message "
                    f"({renderer.name} did not render the probe message's text as such)"
                )
        return self._end
