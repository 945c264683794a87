"""One trajectory: the verdict first (reward, components, tests, flags with their evidence,
a multi-step task's steps), then the session turn by turn (``#turn-N`` links to any turn),
then the grading artifacts."""

from __future__ import annotations

from typing import Any

from envfarm.viewer import svg
from envfarm.viewer.html import (
    chips,
    definition,
    e,
    folded,
    layout,
    number,
    seconds,
    seg,
    table,
)
from envfarm.viewer.pages.artifacts import artifacts_section
from envfarm.viewer.pages.steps import step_spans, steps_section
from envfarm.viewer.pages.turns import segment_html, turn_index
from envfarm.viewer.session import session
from envfarm.viewer.sources import Run


def trajectory_page(base: str, run: Run, document: dict[str, Any]) -> str:
    home = f"{base}/runs/{seg(run.key)}"
    trajectory_id = str(document.get("trajectory_id"))
    group_id = str(document.get("group_id") or "")
    segments = session(document)
    spans = step_spans(document)
    parts = [
        _overview(home, document),
        _reward(document.get("reward") or {}),
        steps_section(spans),
        _judges(document.get("judge_calls") or []),
        _timings(document),
        turn_index(segments, spans),
        "<h2>Session</h2>" + "".join(segment_html(s, spans) for s in segments),
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
