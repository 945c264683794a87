"""The flags of ``envfarm run``, in the order ``--help`` lists them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from envfarm.cli.options import (
    fork_option,
    judge_options,
    offline_option,
    realism_option,
    sidecar_network_option,
    verifier_network_option,
)
from envfarm.models.jobs import MAX_GROUP_SIZE, MAX_RETRIES
from envfarm.policy.profiles import SERVER_PROFILES
from envfarm.policy.toolparse import TOOL_PARSERS

F = TypeVar("F", bound=Callable[..., Any])

FLAGS: list[Callable[[Any], Any]] = [
    click.argument("paths", metavar="TASK_OR_DIR...", nargs=-1, type=click.Path(path_type=Path)),
    click.option(
        "--resume",
        type=click.Path(path_type=Path, file_okay=False, exists=True),
        default=None,
        metavar="OUT_DIR",
        help="Finish an interrupted run in OUT_DIR with its own tasks and options (API keys come "
        "again from --api-key / ENVFARM_API_KEY); finished episodes are not redone.",
    ),
    click.option(
        "--policy",
        "policies",
        multiple=True,
        default=("oracle",),
        show_default=True,
        help="oracle (runs the task's solution), nop (submits at once), "
        "or the base URL of an OpenAI-compatible endpoint, e.g. http://host:8000/v1. "
        "Repeat it to spread episodes over several endpoints, each URL optionally followed by "
        "=WEIGHT (its share of the load; default 1): --policy http://a:8000/v1 "
        "--policy http://b:8000/v1=2.",
    ),
    offline_option,
    verifier_network_option,
    sidecar_network_option,
    realism_option,
    fork_option,
    click.option("--model", default=None, help="Model name sent to the endpoint."),
    click.option(
        "--api-key",
        envvar="ENVFARM_API_KEY",
        default=None,
        help="API key for the endpoints (or ENVFARM_API_KEY). Never written to any output.",
    ),
    click.option(
        "--group-size",
        default=1,
        show_default=True,
        type=click.IntRange(min=1, max=MAX_GROUP_SIZE),
        help="Episodes per task, graded as one GRPO group.",
    ),
    click.option(
        "--concurrency",
        default=4,
        show_default=True,
        type=click.IntRange(min=1),
        help="Episodes running at once.",
    ),
    click.option(
        "--out",
        "out_dir",
        type=click.Path(path_type=Path),
        default=None,
        help="Output directory [default: runs/<timestamp>/].",
    ),
    click.option("--temperature", type=float, default=None, help="Sampling temperature."),
    click.option("--top-p", type=float, default=None, help="Nucleus sampling top-p."),
    click.option("--max-tokens", type=int, default=None, help="Max tokens per model turn."),
    click.option(
        "--seed", type=int, default=None, help="Sampling seed; episode i of a group gets seed + i."
    ),
    click.option(
        "--max-turns",
        default=50,
        show_default=True,
        type=click.IntRange(min=1),
        help="Model turns per episode before it is stopped and graded.",
    ),
    click.option(
        "--agent",
        "agent_name",
        default=None,
        metavar="NAME",
        help="The harness in the sandbox: builtin (envfarm's tool loop, the default), "
        "mini-swe-agent or codex; their calls are captured token-exact (docs/agents.md).",
    ),
    click.option(
        "--agent-spec",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        metavar="FILE",
        help="Your own agent's spec (TOML, docs/agents.md), instead of --agent.",
    ),
    click.option(
        "--context-budget",
        type=click.IntRange(min=1),
        default=None,
        metavar="TOKENS",
        help="Prompt tokens before the agent summarizes its work and restarts its context from "
        "the instruction and the summary (self-summarization; a task's own "
        "[agent].context_budget_tokens applies when smaller). Default: no budget.",
    ),
    click.option(
        "--retries",
        default=2,
        show_default=True,
        type=click.IntRange(min=0, max=MAX_RETRIES),
        help="Extra attempts for an episode that failed for an infrastructure reason.",
    ),
    click.option(
        "--server-profile",
        type=click.Choice(SERVER_PROFILES),
        default="auto",
        show_default=True,
        help="How token ids, logprobs and versions are requested and read: vllm, sglang, llamacpp "
        "(llama.cpp's llama-server), openai (text only), or auto (the server's own API is probed "
        "once, before the first request; when nothing answers, the first answer decides). See "
        "docs/policies.md.",
    ),
    click.option(
        "--routed-experts",
        is_flag=True,
        help="Ask the server for MoE routed experts (SGLang; vLLM returns them when started with "
        "--enable-return-routed-experts).",
    ),
    click.option(
        "--token-mode",
        is_flag=True,
        help="Send prompts as token ids (vLLM, SGLang, llama.cpp): each prompt extends the last "
        "prompt and the ids the model sampled, so turns merge into one training sample. Checked "
        "before the job starts. See docs/policies.md.",
    ),
    click.option(
        "--tokenizer",
        default=None,
        metavar="NAME_OR_DIR",
        help="Token mode: render new messages with this Hugging Face tokenizer instead of the "
        "server's chat template (needed for SGLang).",
    ),
    click.option(
        "--tool-parser",
        type=click.Choice(TOOL_PARSERS),
        default="auto",
        show_default=True,
        help="Token mode: how tool calls are read from the sampled text (hermes: <tool_call>, "
        "fenced: a ```json block, llama: a bare JSON object).",
    ),
    click.option(
        "--samples",
        is_flag=True,
        help="Add merged training samples (token_ids, loss_mask, logprobs) to each trajectory.",
    ),
    click.option(
        "--compact-tokens",
        is_flag=True,
        help="Write each turn's prompt as the ids it adds to the previous context "
        "(prompt_suffix_ids) instead of in full.",
    ),
    click.option(
        "--warm-pool",
        default=0,
        show_default=True,
        type=click.IntRange(min=0),
        help="Started sandboxes kept ready per environment, so an episode does not wait for its "
        "sandbox to start (each is used once; the pool refills in the background).",
    ),
    click.option(
        "--runtime",
        default=None,
        metavar="NAME",
        help="Container runtime of every sandbox, as registered with the Docker engine, e.g. "
        "runsc (gVisor; tasks that need the network are refused under it). Default: the "
        "engine's. A task with [environment] runtime = 'gvisor' runs under gVisor anyway.",
    ),
    judge_options(
        "Base URL of an OpenAI-compatible endpoint that judges the tasks' rubric items "
        "(docs/rubrics.md); may be another server than the policy."
    ),
    click.option(
        "--allow-unjudged",
        is_flag=True,
        help="Without --judge, grade rubric tasks by their tests alone (flagged rubric:unjudged) "
        "instead of refusing them. Implied by the built-in oracle and nop policies.",
    ),
]


def run_flags(command: F) -> F:
    for flag in reversed(FLAGS):
        command = flag(command)
    return command
