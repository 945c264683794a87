"""A fake inference engine with llama.cpp's (or vLLM's, SGLang's) own API, over real HTTP.

Where ``fake_vllm`` fakes the chat endpoint of vLLM and SGLang, this one fakes what lies beside
it, in the shapes the real servers send (llama.cpp's as recorded from ``llama-server``):

- llama.cpp: ``GET /props``; ``POST /v1/chat/completions`` with ``logprobs.content[]`` of
  ``{id, token, bytes, logprob, top_logprobs}`` only when ``logprobs`` is true and
  ``top_logprobs`` is not 0 (it defaults to 20), ``timings`` at the root, and HTTP 500 with a
  ``[json.exception.parse_error...]`` message when a history's tool-call arguments are not JSON;
  HTTP 400 ``exceed_context_size_error`` past ``n_ctx``; ``POST /apply-template`` (a final
  assistant message is a prefill, refused with HTTP 400 when it has tool calls), ``/tokenize``,
  ``/detokenize`` and ``/completion`` (a prompt of ids; ``tokens``, ``completion_probabilities``,
  ``stop_type``, ``tokens_evaluated``, ``timings``).
- vLLM: ``GET /version``, ``POST /tokenize`` (messages or a prompt), ``POST /v1/completions``
  with a list-of-ids prompt (``token_ids``, ``prompt_token_ids``, ``logprobs.token_logprobs``).
- SGLang: ``GET /get_server_info``, ``POST /generate`` with ``input_ids`` (``output_ids``,
  ``meta_info.output_token_logprobs`` as ``[logprob, id, text]``, ``weight_version``).
- vLLM and SGLang chat answers in their real shapes (``fake_shapes``: token fields only when the
  request asks for them), and ``openai``: a plain server that answers no probe and gives text.

``probe_gate`` makes a server whose own API answers late: every probe of it (``PROBE_PATHS``)
waits for the event, so a test can start several first requests while detection is pending.
``timeline`` records each request as it arrives and each probe as it is answered.

The model answers the n-th generation request with the n-th scripted step, sampled as the
``fake_chatml`` model samples (tool calls pretty-printed, ``<|im_end|>`` at the end, cut at
``max_tokens`` with finish ``length``). ``faults`` (raw ``Reply``s) answer the first generation
requests, ``path_faults`` the first POSTs of a path.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, Literal

from aiohttp import web

from envfarm.policy.server import Reply, completion_reply, error_reply
from envfarm.policy.toolparse import parse_tool_calls
from envfarm.testing import fake_chatml as chatml
from envfarm.testing.fake_shapes import FakeAnswer, Routing
from envfarm.testing.scripted import ScriptedCompletion, Step, _normalize

EngineDialect = Literal["llamacpp", "vllm", "sglang", "openai"]
PROBE_PATHS = ("/props", "/get_server_info", "/version")
"""The server APIs ``auto`` detection asks (``policy.profiles.probe_profile``)."""
PARSE_ERROR = (
    "[json.exception.parse_error.101] parse error at line 1, column 38: syntax error while "
    "parsing value - unexpected end of input; expected '[', '{', or a literal"
)
TIMINGS = {
    "cache_n": 0,
    "prompt_n": 0,
    "prompt_ms": 12.5,
    "prompt_per_token_ms": 0.1,
    "prompt_per_second": 10000.0,
    "predicted_n": 0,
    "predicted_ms": 20.0,
    "predicted_per_token_ms": 1.0,
    "predicted_per_second": 1000.0,
}


class FakeEngine:
    def __init__(
        self,
        steps: Iterable[Step],
        *,
        dialect: EngineDialect = "llamacpp",
        n_ctx: int = 1 << 20,
        faults: Iterable[Reply] = (),
        weight_version: str = "v1",
        probe_gate: asyncio.Event | None = None,
        port: int = 0,
    ) -> None:
        """``port``: 0 for a free one; a given port serves a restarted engine where the last
        one was (what a restarted server looks like to its clients)."""
        self.port = port
        self.steps: list[ScriptedCompletion | Reply] = [_normalize(s) for s in steps]
        self.dialect, self.n_ctx, self.weight_version = dialect, n_ctx, weight_version
        self.faults = list(faults)
        self.path_faults: dict[str, list[Reply]] = {}
        """Raw replies to the first POSTs of a path (``/tokenize``: a side request failing)."""
        self.requests: list[tuple[str, dict[str, Any]]] = []
        """Every POST: (path, body)."""
        self.prompts: list[list[int]] = []
        """The prompt ids of every generation the engine ran."""
        self.sampled: list[list[int]] = []
        """The ids the model sampled in each generation it completed (beside ``prompts``)."""
        self.probe_gate = probe_gate
        self.probing = asyncio.Event()
        """Set when the first probe arrives."""
        self.timeline: list[str] = []
        """``GET /props``, ``answered GET /props``, ``POST /v1/chat/completions``... in order."""
        self._cache: list[int] = []
        self._runner: web.AppRunner | None = None
        self.root = ""

    @property
    def base_url(self) -> str:
        return f"{self.root}/v1"

    async def __aenter__(self) -> FakeEngine:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/{path:.*}", self._post)
        app.router.add_get("/{path:.*}", self._get)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        host, self.port = self._runner.addresses[0][:2]
        self.root = f"http://{host}:{self.port}"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _get(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["path"]
        self.timeline.append(f"GET {path}")
        if path in PROBE_PATHS:
            self.probing.set()
            if self.probe_gate is not None:
                await self.probe_gate.wait()
            self.timeline.append(f"answered GET {path}")
        models = {"object": "list", "data": [{"id": "fake", "object": "model"}]}
        answers: dict[str, dict[EngineDialect, Any]] = {
            "/props": {
                "llamacpp": {
                    "default_generation_settings": {"n_ctx": self.n_ctx},
                    "chat_template": "{# ChatML #}",
                    "build_info": "b0-fake",
                }
            },
            "/version": {"vllm": {"version": "0.0.0-fake"}},
            "/get_server_info": {"sglang": {"version": "0.0.0-fake", "model_path": "fake"}},
            "/v1/models": {"llamacpp": models, "vllm": models, "sglang": models, "openai": models},
            "/health": {"llamacpp": {"status": "ok"}, "vllm": {}, "sglang": {}},
        }
        body = answers.get(path, {}).get(self.dialect)
        if body is None:
            return web.Response(status=404, text="Not Found")
        return web.json_response(body)

    async def _post(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["path"]
        try:
            body = json.loads(await request.read())
        except ValueError as exc:
            return _reply(error_reply(500, f"[json.exception.parse_error.101] {exc}"))
        self.requests.append((path, body))
        self.timeline.append(f"POST {path}")
        if self.path_faults.get(path):
            return _reply(self.path_faults[path].pop(0))
        handler = {
            ("llamacpp", "/v1/chat/completions"): self._llamacpp_chat,
            ("vllm", "/v1/chat/completions"): self._chat,
            ("sglang", "/v1/chat/completions"): self._chat,
            ("openai", "/v1/chat/completions"): self._chat,
            ("llamacpp", "/apply-template"): self._apply_template,
            ("llamacpp", "/tokenize"): self._tokenize,
            ("llamacpp", "/detokenize"): self._detokenize,
            ("llamacpp", "/completion"): self._llamacpp_completion,
            ("vllm", "/tokenize"): self._vllm_tokenize,
            ("vllm", "/v1/completions"): self._vllm_completions,
            ("sglang", "/generate"): self._sglang_generate,
        }.get((self.dialect, path))
        if handler is None:
            return web.Response(status=404, text="Not Found")
        try:
            return _reply(handler(body))
        except ValueError:  # the template engine could not parse the history
            return _reply(error_reply(500, PARSE_ERROR, type="server_error"))

    # -- the model ---------------------------------------------------------------------------

    def _sample(self, prompt: list[int], max_tokens: Any) -> tuple[list[int], str] | Reply:
        if len(prompt) > self.n_ctx:
            return _context_error(len(prompt), self.n_ctx)
        if self.faults:
            return self.faults.pop(0)
        index = len(self.prompts)
        self.prompts.append(list(prompt))
        if index >= len(self.steps):
            return error_reply(500, f"the fake engine's script is exhausted (request {index + 1})")
        step = self.steps[index]
        if isinstance(step, Reply):
            return step
        parts = [step.content] if step.content else []
        parts += [chatml.sampled_call(c.name, c.arguments) for c in step.tool_calls]
        ids = [*chatml.tokenize("\n".join(parts), parse_special=False), chatml.IM_END]
        finish = "stop"
        if isinstance(max_tokens, int) and 0 < max_tokens < len(ids):
            ids, finish = ids[:max_tokens], "length"
        self.sampled.append(ids)
        return ids, finish

    def _probs(self, prompt: list[int], ids: Sequence[int], top: int) -> list[dict[str, Any]]:
        out = []
        for i, token in enumerate(ids):
            text = chatml.piece(token) if token != chatml.IM_END else ""
            lp = chatml.logprob(token, len(prompt) + i)
            alternatives = [
                {"id": token, "token": text, "bytes": list(text.encode()), "logprob": lp}
            ]
            out.append(
                {
                    "id": token,
                    "token": text,
                    "bytes": list(text.encode()),
                    "logprob": lp,
                    "top_logprobs": alternatives[:top],
                }
            )
        return out

    def _timings(self, prompt: list[int], ids: Sequence[int]) -> dict[str, Any]:
        cached = 0
        while cached < min(len(prompt), len(self._cache)) and prompt[cached] == self._cache[cached]:
            cached += 1
        self._cache = list(prompt) + list(ids)
        return {
            **TIMINGS,
            "cache_n": cached,
            "prompt_n": len(prompt) - cached,
            "predicted_n": len(ids),
        }

    # -- llama.cpp ---------------------------------------------------------------------------

    def _llamacpp_chat(self, body: dict[str, Any]) -> Reply:
        prompt = chatml.tokenize(chatml.render(body.get("messages", []), body.get("tools") or []))
        if body.get("top_logprobs") is not None and not body.get("logprobs"):
            return error_reply(400, "top_logprobs requires logprobs to be set to true")
        sampled = self._sample(prompt, body.get("max_tokens"))
        if isinstance(sampled, Reply):
            return sampled
        ids, finish = sampled
        text = chatml.detokenize([t for t in ids if t != chatml.IM_END])
        content, calls = parse_tool_calls(text, "hermes")
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = [
                {
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                    "id": f"fc{i}",
                }
                for i, c in enumerate(calls)
            ]
        choice: dict[str, Any] = {
            "finish_reason": "tool_calls" if calls and finish == "stop" else finish,
            "index": 0,
            "message": message,
        }
        top = body.get("top_logprobs", 20)
        if body.get("logprobs") and top:
            choice["logprobs"] = {"content": self._probs(prompt, ids, int(top))}
        timings = self._timings(prompt, ids)
        usage = {
            "completion_tokens": len(ids),
            "prompt_tokens": len(prompt),
            "total_tokens": len(prompt) + len(ids),
            "prompt_tokens_details": {"cached_tokens": timings["cache_n"]},
        }
        return Reply(
            body={
                "choices": [choice],
                "created": int(time.time()),
                "model": body.get("model", "fake"),
                "system_fingerprint": "b0-fake",
                "object": "chat.completion",
                "usage": usage,
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "timings": timings,
            }
        )

    def _chat(self, body: dict[str, Any]) -> Reply:
        """vLLM's, SGLang's or a plain OpenAI server's chat answer."""
        prompt = chatml.tokenize(chatml.render(body.get("messages", []), body.get("tools") or []))
        sampled = self._sample(prompt, body.get("max_tokens"))
        if isinstance(sampled, Reply):
            return sampled
        ids, finish = sampled
        content, calls = parse_tool_calls(chatml.detokenize([t for t in ids if t != chatml.IM_END]))
        finish = "tool_calls" if calls and finish == "stop" else finish
        model = str(body.get("model", "fake"))
        if self.dialect == "openai":
            usage = {"prompt_tokens": len(prompt), "completion_tokens": len(ids)}
            return completion_reply(
                model, content=content, tool_calls=calls, finish_reason=finish, usage=usage
            )
        tool_calls = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ]
        logprobs = [chatml.logprob(t, len(prompt) + i) for i, t in enumerate(ids)]
        answer = FakeAnswer(
            body, prompt, ids, logprobs, content, tool_calls, finish, None, self.weight_version
        )
        shaped = answer.vllm(Routing()) if self.dialect == "vllm" else answer.sglang(Routing())
        return Reply(body=shaped)

    def _apply_template(self, body: dict[str, Any]) -> Reply:
        generation = body.get("add_generation_prompt", True)
        text = chatml.render(
            body.get("messages", []), body.get("tools") or [], generation=generation
        )
        return Reply(body={"prompt": text})

    def _tokenize(self, body: dict[str, Any]) -> Reply:
        content = body.get("content", "")
        return Reply(
            body={"tokens": chatml.tokenize(content, parse_special=body.get("parse_special", True))}
        )

    def _detokenize(self, body: dict[str, Any]) -> Reply:
        return Reply(body={"content": chatml.detokenize(body.get("tokens") or [])})

    def _llamacpp_completion(self, body: dict[str, Any]) -> Reply:
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            prompt = chatml.tokenize(prompt)
        if not isinstance(prompt, list) or not all(type(t) is int for t in prompt):
            return error_reply(400, '"prompt" must be a string or a list of tokens')
        sampled = self._sample(prompt, body.get("n_predict"))
        if isinstance(sampled, Reply):
            return sampled
        ids, finish = sampled
        answer: dict[str, Any] = {
            "index": 0,
            "content": chatml.detokenize([t for t in ids if t != chatml.IM_END]),
            "tokens": ids if body.get("return_tokens") else [],
            "id_slot": 0,
            "stop": True,
            "model": "fake",
            "tokens_predicted": len(ids),
            "tokens_evaluated": len(prompt),
            "stop_type": "eos" if finish == "stop" else "limit",
            "stopping_word": "",
            "tokens_cached": len(prompt) + len(ids) - 1,
            "timings": self._timings(prompt, ids),
        }
        if body.get("n_probs"):
            answer["completion_probabilities"] = self._probs(prompt, ids, int(body["n_probs"]))
        return Reply(body=answer)

    # -- vLLM and SGLang ---------------------------------------------------------------------

    def _vllm_tokenize(self, body: dict[str, Any]) -> Reply:
        if "messages" in body:
            text = chatml.render(
                body["messages"],
                body.get("tools") or [],
                generation=body.get("add_generation_prompt", True),
            )
        else:
            text = str(body.get("prompt", ""))
        tokens = chatml.tokenize(text)
        return Reply(body={"count": len(tokens), "max_model_len": self.n_ctx, "tokens": tokens})

    def _vllm_completions(self, body: dict[str, Any]) -> Reply:
        prompt = body.get("prompt")
        if not isinstance(prompt, list):
            return error_reply(400, "prompt must be a list of token ids here")
        if len(prompt) > self.n_ctx:
            message = (
                f"This model's maximum context length is {self.n_ctx} tokens. However, your "
                f"request has {len(prompt)} input tokens."
            )
            return error_reply(400, message, type="BadRequestError")
        sampled = self._sample(prompt, body.get("max_tokens"))
        if isinstance(sampled, Reply):
            return sampled
        ids, finish = sampled
        shown = [t for t in ids if t != chatml.IM_END]
        logprobs = {
            "tokens": [chatml.piece(t) for t in ids],
            "token_logprobs": [chatml.logprob(t, len(prompt) + i) for i, t in enumerate(ids)],
            "top_logprobs": None,
            "text_offset": list(range(len(ids))),
        }
        choice = {
            "index": 0,
            "text": chatml.detokenize(shown),
            "logprobs": logprobs,
            "finish_reason": finish,
            "stop_reason": None,
            "prompt_logprobs": None,
            "prompt_token_ids": prompt if body.get("return_token_ids") else None,
            "token_ids": ids if body.get("return_token_ids") else None,
        }
        usage = {
            "prompt_tokens": len(prompt),
            "completion_tokens": len(ids),
            "total_tokens": len(prompt) + len(ids),
        }
        return Reply(
            body={
                "id": f"cmpl-{uuid.uuid4().hex}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": body.get("model", "fake"),
                "choices": [choice],
                "usage": usage,
            }
        )

    def _sglang_generate(self, body: dict[str, Any]) -> Reply:
        prompt = body.get("input_ids")
        if not isinstance(prompt, list):
            return error_reply(400, "input_ids must be a list of token ids")
        if len(prompt) > self.n_ctx:
            message = (
                f"The input ({len(prompt)} tokens) is longer than the model's context length "
                f"({self.n_ctx} tokens)."
            )
            return error_reply(400, message)
        params = body.get("sampling_params") or {}
        sampled = self._sample(prompt, params.get("max_new_tokens"))
        if isinstance(sampled, Reply):
            return sampled
        ids, finish = sampled
        triples = [
            [
                chatml.logprob(t, len(prompt) + i),
                t,
                chatml.piece(t) if body.get("return_text_in_logprobs") else None,
            ]
            for i, t in enumerate(ids)
        ]
        meta: dict[str, Any] = {
            "id": uuid.uuid4().hex,
            "finish_reason": {
                "type": finish,
                **({"matched": chatml.IM_END} if finish == "stop" else {"length": len(ids)}),
            },
            "prompt_tokens": len(prompt),
            "completion_tokens": len(ids),
            "cached_tokens": 0,
            "weight_version": self.weight_version,
            "e2e_latency": 0.01,
        }
        if body.get("return_logprob"):
            meta["output_token_logprobs"] = triples
        text = chatml.detokenize([t for t in ids if t != chatml.IM_END])
        return Reply(body={"text": text, "output_ids": ids, "meta_info": meta})


def _context_error(tokens: int, n_ctx: int) -> Reply:
    message = (
        f"request ({tokens} tokens) exceeds the available context size ({n_ctx} tokens), try "
        "increasing it"
    )
    return Reply(
        status=400,
        body={
            "error": {
                "code": 400,
                "message": message,
                "type": "exceed_context_size_error",
                "n_prompt_tokens": tokens,
                "n_ctx": n_ctx,
            }
        },
    )


def _reply(reply: Reply) -> web.Response:
    if isinstance(reply.body, dict):
        return web.json_response(reply.body, status=reply.status, headers=reply.headers)
    return web.Response(status=reply.status, body=reply.body, headers=reply.headers)
