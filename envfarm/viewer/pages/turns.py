"""The session of a trajectory as HTML: each segment, each turn (anchor ``#turn-N``) with the
model's reasoning and reply, its tool calls and their whole outputs, and its token view; a
multi-step session's steps marked on it (``steps``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from envfarm.viewer.html import e, folded, pretty_json, seconds
from envfarm.viewer.pages.steps import StepSpan, step_band, step_of
from envfarm.viewer.session import SegmentView, TurnView, message_text, reasoning_text


def turn_index(segments: list[SegmentView], spans: Sequence[StepSpan] = ()) -> str:
    """Links to every turn; for a multi-step session, one line per step."""
    groups: dict[int | None, list[str]] = {}
    for segment in segments:
        for view in segment.turns:
            if view.turn is None:
                continue
            index = view.turn.get("index")
            cls = "summary" if view.turn.get("kind") == "summary" else ""
            link = f'<a class="{cls}" href="#turn-{e(index)}">{e(index)}</a>'
            step = step_of(spans, index)
            groups.setdefault(step.position if step else None, []).append(link)
    if not groups:
        return ""
    if not spans:
        return '<nav class="turn-index">turns: ' + " ".join(groups[None]) + "</nav>"
    lines = [
        f'<div><a class="step" href="#{span.anchor}">{e(span.name)}</a>: '
        + (" ".join(groups.get(span.position, [])) or '<span class="muted">no turns</span>')
        + "</div>"
        for span in spans
    ]
    if None in groups:
        lines.append("<div>outside the steps: " + " ".join(groups[None]) + "</div>")
    return '<nav class="turn-index steps">turns by step' + "".join(lines) + "</nav>"


def segment_html(segment: SegmentView, spans: Sequence[StepSpan] = ()) -> str:
    head = f'<h3 id="segment-{segment.index}">segment {segment.index}</h3>'
    record = segment.record
    if record is not None:
        budget = record.get("context_budget")
        tokens = record.get("context_tokens")
        estimated = " (estimated)" if record.get("context_estimated") else ""
        head += (
            f'<p class="muted">started at turn {e(record.get("first_turn"))} '
            "by the summary of turn "
            f"{e(record.get('summary_turn'))}: the next prompt would have been {e(tokens)} tokens"
            f"{estimated} against a budget of {e(budget)}</p>"
            + '<div class="summary-text">'
            + folded(str(record.get("summary") or ""), label="summary", open_=True)
            + "</div>"
        )
    opening = "".join(_message(m) for m in segment.opening)
    if opening:
        opening = (
            f'<details class="fold opening"><summary>context opening ({len(segment.opening)}'
            f" messages)</summary>{opening}</details>"
        )
    return f'<section class="segment">{head}{opening}' + _turns(segment.turns, spans) + "</section>"


def _turns(views: list[TurnView], spans: Sequence[StepSpan]) -> str:
    """The turns, each step's band before its first turn; the user message that gave a step
    its instruction (after the previous step's last turn) is shown under the step's band."""
    bands = {span.first_turn: step_band(span) for span in spans if span.first_turn is not None}
    parts, instruction = [], ""
    for position, view in enumerate(views):
        index = _index(view)
        next_starts = position + 1 < len(views) and _index(views[position + 1]) in bands
        band = bands.get(index, "") + instruction if index is not None else ""
        instruction = ""
        if next_starts:
            asked = [m for m in view.after if m.get("role") == "user"]
            instruction = "".join(_message(m) for m in asked)
            view = TurnView(view.turn, view.message, [m for m in view.after if m not in asked])
        parts.append(band + _turn(view, step_of(spans, index)))
    return "".join(parts)


def _index(view: TurnView) -> int | None:
    index = (view.turn or {}).get("index")
    return index if isinstance(index, int) else None


def _message(message: dict[str, Any]) -> str:
    role = str(message.get("role") or "?")
    text = message_text(message)
    return (
        f'<div class="message role-{e(role)}"><div class="role">{e(role)}</div>'
        f"{folded(text, label=role)}</div>"
    )


def _turn(view: TurnView, step: StepSpan | None = None) -> str:
    turn = view.turn or {}
    index = turn.get("index", "?")
    kind = str(turn.get("kind") or "action")
    meta = [
        *([f'step <a href="#{step.anchor}">{e(step.name)}</a>'] if step is not None else []),
        f"segment {e(turn.get('segment', 0))}",
        f"policy version <strong>{e(turn.get('policy_version') or 'none')}</strong>"
        + (
            f" ({e(turn.get('policy_version_source'))})"
            if turn.get("policy_version_source")
            else ""
        ),
        f"finish {e(turn.get('finish_reason'))}",
        f"latency {seconds(turn.get('latency_s'))}",
    ]
    if (turn.get("attempts") or 1) > 1:
        meta.append(f"{e(turn.get('attempts'))} attempts, paused {seconds(turn.get('paused_s'))}")
    usage = turn.get("usage") or {}
    if usage:
        meta.append(
            f"tokens {e(usage.get('prompt_tokens'))} in / {e(usage.get('completion_tokens'))} out"
        )
    if turn.get("endpoint"):
        meta.append(f"endpoint {e(turn.get('endpoint'))}")
    spans = turn.get("policy_version_spans") or []
    if spans:
        meta.append(
            "version spans "
            + ", ".join(
                f"{e(s.get('version'))} [{e(s.get('start'))}, {e(s.get('end'))})" for s in spans
            )
        )
    parts = [
        f'<section class="turn kind-{e(kind)}" id="turn-{e(index)}">'
        f'<h4><a href="#turn-{e(index)}">turn {e(index)}</a>'
        + (' <span class="chip">summary</span>' if kind == "summary" else "")
        + f'</h4><p class="meta">{" · ".join(meta)}</p>'
    ]
    faults = turn.get("faults") or []
    if faults:
        parts.append('<p class="invalid">token data faults: ' + e("; ".join(faults)) + "</p>")
    message = view.message or {}
    reasoning = reasoning_text(message)
    if reasoning:
        parts.append(f'<div class="reasoning">{folded(reasoning, label="reasoning")}</div>')
    text = message_text(message)
    if text:
        parts.append(f'<div class="message role-assistant">{folded(text, label="reply")}</div>')
    parts.append(_tools(message, turn, view.after))
    parts.append(_tokens(turn))
    parts.append("</section>")
    return "".join(parts)


def _tools(message: dict[str, Any], turn: dict[str, Any], after: list[dict[str, Any]]) -> str:
    results = {r.get("call_id"): r for r in turn.get("tool_results") or [] if isinstance(r, dict)}
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    blocks = []
    shown: set[Any] = set()
    for call in calls:
        function = call.get("function") or {}
        result = results.get(call.get("id"))
        shown.add(call.get("id"))
        blocks.append(
            _tool(str(function.get("name")), str(function.get("arguments") or ""), result)
        )
    for call_id, result in results.items():
        if call_id not in shown:
            blocks.append(
                _tool(str(result.get("name")), str(result.get("arguments") or ""), result)
            )
    for extra in after:
        if extra.get("role") == "tool" and extra.get("tool_call_id") in results:
            continue
        blocks.append(_message(extra))
    return "".join(blocks)


def _tool(name: str, arguments: str, result: dict[str, Any] | None) -> str:
    head = f'<div class="tool-call"><div class="tool-name">{e(name)}</div>'
    body = f'<pre class="text args">{e(pretty_json(arguments))}</pre>'
    if result is None:
        return head + body + '<p class="muted">no result recorded</p></div>'
    facts = [f"exit {e(result.get('exit_code'))}", seconds(result.get("duration_s"))]
    if result.get("truncated"):
        facts.append('<span class="chip flag">output truncated for the model</span>')
    if result.get("error"):
        facts.append(f'<span class="invalid">rejected: {e(result.get("error"))}</span>')
    output = str(result.get("output") or "")
    return (
        head
        + body
        + f'<p class="meta">{" · ".join(facts)}</p>'
        + f'<div class="tool-output">{folded(output, label="tool output")}</div></div>'
    )


def _tokens(turn: dict[str, Any]) -> str:
    ids = turn.get("completion_token_ids")
    if not isinstance(ids, list) or not ids:
        source = turn.get("token_source")
        return f'<p class="muted">no token data (token source: {e(source)})</p>' if source else ""
    logprobs = _list(turn.get("logprobs"))
    texts = _list(turn.get("completion_tokens"))
    spans = []
    for i, token in enumerate(ids):
        lp = logprobs[i] if i < len(logprobs) and isinstance(logprobs[i], int | float) else None
        label = texts[i] if i < len(texts) and isinstance(texts[i], str) else str(token)
        if lp is None:
            spans.append(f'<span class="tok">{e(label)}</span>')
            continue
        p = math.exp(lp) if lp <= 0 else 1.0
        bucket = min(9, int(p * 10))
        spans.append(
            f'<span class="tok lp{bucket}" title="id {e(token)} · logprob {lp:.4f} · p {p:.3f}">'
            f"{e(label)}</span>"
        )
    prompt = turn.get("prompt_token_ids")
    suffix = turn.get("prompt_suffix_ids")
    prompt_note = (
        f"prompt {len(prompt)} tokens"
        if isinstance(prompt, list)
        else f"prompt suffix {len(suffix)} tokens"
        if isinstance(suffix, list)
        else ""
    )
    kind = "text" if texts else "ids (the server sent no token text)"
    return (
        '<details class="fold tokens"><summary>'
        f"completion tokens: {len(ids)}, coloured by logprob; shown as {kind}"
        f"{' · ' + prompt_note if prompt_note else ''}</summary>"
        '<div class="token-legend">p: <span class="tok lp0">0</span><span class="tok lp3">.3</span>'
        '<span class="tok lp6">.6</span><span class="tok lp9">.9+</span></div>'
        f'<div class="token-view">{" ".join(spans)}</div></details>'
    )


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
