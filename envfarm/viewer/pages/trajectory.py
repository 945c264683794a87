"""One trajectory: the verdict first (reward, components, tests, flags with their evidence),
then the session turn by turn (``#turn-N`` links to any turn), then the grading artifacts."""

from __future__ import annotations

import math
from typing import Any

from envfarm.viewer import svg
from envfarm.viewer.html import (
    chips,
    definition,
    e,
    folded,
    layout,
    number,
    pretty_json,
    seconds,
    seg,
    table,
)
from envfarm.viewer.pages.artifacts import artifacts_section
from envfarm.viewer.session import SegmentView, TurnView, message_text, reasoning_text, session
from envfarm.viewer.sources import Run


def trajectory_page(base: str, run: Run, document: dict[str, Any]) -> str:
    home = f"{base}/runs/{seg(run.key)}"
    trajectory_id = str(document.get("trajectory_id"))
    group_id = str(document.get("group_id") or "")
    segments = session(document)
    parts = [
        _overview(home, document),
        _reward(document.get("reward") or {}),
        _judges(document.get("judge_calls") or []),
        _timings(document),
        _turn_index(segments),
        "<h2>Session</h2>" + "".join(_segment(s) for s in segments),
        artifacts_section(run.artifacts_root(), document.get("artifacts")),
    ]
    crumbs = [
        (run.name, home),
        (f"group {group_id[-12:]}", f"{home}/groups/{seg(group_id)}"),
        (trajectory_id, f"{home}/t/{seg(trajectory_id)}"),
    ]
    return layout(base, trajectory_id, "".join(parts), crumbs=crumbs)


def _overview(home: str, doc: dict[str, Any]) -> str:
    outcome = doc.get("outcome") or {}
    versions = doc.get("policy_versions") or {}
    provenance = doc.get("provenance") or {}
    facts = {
        "task": e(doc.get("task_id")),
        "group": f'<a href="{e(home)}/groups/{seg(str(doc.get("group_id")))}">'
        f"{e(doc.get('group_id'))}</a>",
        "episode": e(doc.get("episode_id")),
        "attempt": e(doc.get("attempt")),
        "model": e(doc.get("model")),
        "stop reason": e(outcome.get("stop_reason")),
        "turns": e(outcome.get("turns")),
        "malformed tool calls": e(outcome.get("malformed_tool_calls")),
        "advantage": number(doc.get("advantage")),
        "zero-variance group": e(doc.get("group_zero_variance")),
        "policy versions": f"{e(versions.get('min'))} - {e(versions.get('max'))}",
        "task hash": e(provenance.get("task_hash")),
        "image": e(provenance.get("image_id")),
        "seed": e(provenance.get("seed")),
    }
    error = doc.get("error")
    extra = ""
    if isinstance(error, dict):
        kind = "infrastructure" if error.get("infrastructure") else "model"
        extra = (
            f'<div class="error"><strong>{e(error.get("type"))}</strong> in '
            f"{e(error.get('phase'))} ({kind} fault, "
            f"{'retryable' if error.get('retryable') else 'not retryable'}): "
            f"{folded(str(error.get('message') or ''), label='message')}</div>"
        )
    return definition(facts) + extra


def _reward(reward: dict[str, Any]) -> str:
    valid = bool(reward.get("valid"))
    value = number(reward.get("value")) if valid else '<span class="invalid">invalid</span>'
    head = (
        f'<p class="reward">reward <strong>{value}</strong> '
        f'<span class="muted">{e(reward.get("reason"))}</span></p>'
    )
    components = reward.get("components") or {}
    comp = (
        table(["component", "value"], [[e(k), number(v)] for k, v in components.items()])
        if components
        else ""
    )
    flags = reward.get("flags") or []
    details = reward.get("flag_details") or {}
    flag_rows = [
        [chips([flag], "chip flag"), "<br>".join(e(x) for x in details.get(flag) or []) or "-"]
        for flag in flags
    ]
    flag_table = (
        '<h3>Flags</h3><div class="flags">' + table(["flag", "evidence"], flag_rows) + "</div>"
        if flags
        else ""
    )
    tests = reward.get("tests") or []
    test_rows = [
        [
            e(t.get("name")),
            f'<span class="test-{e(t.get("status"))}">{e(t.get("status"))}</span>',
            seconds(t.get("duration_s")),
            e(t.get("report")),
        ]
        for t in tests
        if isinstance(t, dict)
    ]
    passed = sum(1 for t in tests if isinstance(t, dict) and t.get("status") == "passed")
    test_table = (
        f"<h3>Tests ({passed} of {len(tests)} passed)</h3>"
        + table(["test", "status", "time", "report"], test_rows, cls="tests")
        if tests
        else ""
    )
    return (
        '<section id="reward"><h2>Reward</h2>'
        + head
        + comp
        + flag_table
        + test_table
        + "</section>"
    )


def _judges(calls: list[Any]) -> str:
    if not calls:
        return ""
    blocks = []
    for call in calls:
        if not isinstance(call, dict):
            continue
        attempts = "".join(
            folded(str(a.get("response") or a.get("problem") or ""), label="reply")
            for a in call.get("attempts") or []
            if isinstance(a, dict)
        )
        blocks.append(
            f'<article class="judge"><h3>{e(call.get("item"))}: score '
            f"{number(call.get('score'))} <span class=muted>(weight {e(call.get('weight'))}, "
            f"raw {e(call.get('raw_score'))})</span></h3><p>{e(call.get('reason'))}</p>"
            f"{'<p class=invalid>' + e(call.get('error')) + '</p>' if call.get('error') else ''}"
            f"{folded(str(call.get('prompt') or ''), label='prompt')}{attempts}</article>"
        )
    return "<h2>Rubric judges</h2>" + "".join(blocks)


def _timings(doc: dict[str, Any]) -> str:
    timings = {k: v for k, v in (doc.get("timings") or {}).items() if isinstance(v, int | float)}
    turns = [t for t in doc.get("turns") or [] if isinstance(t, dict)]
    rows = [[e(k.removesuffix("_s")), seconds(v)] for k, v in timings.items() if v is not None]
    longest = max((_turn_seconds(t) for t in turns), default=0.0) or 1.0
    bars = "".join(
        f'<div class="turn-bar"><a href="#turn-{e(t.get("index"))}">turn {e(t.get("index"))}</a>'
        f"{_turn_bar(t, longest)}</div>"
        for t in turns
    )
    per_turn = (
        f'<details class="fold"><summary>time per turn (model vs tools)</summary>{bars}</details>'
        if turns
        else ""
    )
    return (
        '<section id="timings"><h2>Timings</h2>'
        f"{svg.phase_bar(timings)}<div>{svg.phase_legend()}</div>"
        + table(["phase", "seconds"], rows)
        + per_turn
        + "</section>"
    )


def _turn_seconds(turn: dict[str, Any]) -> float:
    tools = sum(float(r.get("duration_s") or 0) for r in turn.get("tool_results") or [])
    return float(turn.get("latency_s") or 0) + float(turn.get("paused_s") or 0) + tools


def _turn_bar(turn: dict[str, Any], longest: float) -> str:
    width = 300
    model = float(turn.get("latency_s") or 0)
    paused = float(turn.get("paused_s") or 0)
    tools = _turn_seconds(turn) - model - paused
    x = 0.0
    rects = []
    for cls, value, name in (
        ("model", model, "model"),
        ("paused", paused, "paused"),
        ("tools", tools, "tools"),
    ):
        w = width * value / longest
        if w > 0:
            rects.append(
                f'<rect class="t-{cls}" x="{x:.1f}" y="1" width="{w:.1f}" height="10">'
                f"<title>{name}: {value:.3f} s</title></rect>"
            )
            x += w
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" height="12">'
        + "".join(rects)
        + "</svg>"
    )


def _turn_index(segments: list[SegmentView]) -> str:
    links = []
    for segment in segments:
        for view in segment.turns:
            if view.turn is None:
                continue
            index = view.turn.get("index")
            cls = "summary" if view.turn.get("kind") == "summary" else ""
            links.append(f'<a class="{cls}" href="#turn-{e(index)}">{e(index)}</a>')
    if not links:
        return ""
    return '<nav class="turn-index">turns: ' + " ".join(links) + "</nav>"


def _segment(segment: SegmentView) -> str:
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
    return (
        f'<section class="segment">{head}{opening}'
        + "".join(_turn(v) for v in segment.turns)
        + "</section>"
    )


def _message(message: dict[str, Any]) -> str:
    role = str(message.get("role") or "?")
    text = message_text(message)
    return (
        f'<div class="message role-{e(role)}"><div class="role">{e(role)}</div>'
        f"{folded(text, label=role)}</div>"
    )


def _turn(view: TurnView) -> str:
    turn = view.turn or {}
    index = turn.get("index", "?")
    kind = str(turn.get("kind") or "action")
    meta = [
        f"segment {e(turn.get('segment', 0))}",
        f"policy version <strong>{e(turn.get('policy_version'))}</strong>"
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
