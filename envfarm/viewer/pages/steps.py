"""A multi-step trajectory's steps (``trajectory.steps``) on its page.

Steps and segments divide the same turns independently (a summary may restart the context in
the middle of a step), so the session keeps its segments and *marks* the steps instead of
nesting one in the other: a band before each step's first turn (anchor ``#step-N``, N its
position) with its reward and its span of turns, the step's name on each of its turns, and the
turn index grouped by step. The steps table near the top of the page says what each step got and
links to its band and turns, so a long session is read step by step without scrolling through
it. A step whose agent made no model call has no turns, hence no band: the table says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from envfarm.viewer.html import e, number, table


@dataclass(frozen=True)
class StepSpan:
    position: int
    name: str
    reward: dict[str, Any]
    first_turn: int | None
    last_turn: int | None
    stop_reason: str | None

    @property
    def anchor(self) -> str:
        return f"step-{self.position}"

    def holds(self, turn: int) -> bool:
        if self.first_turn is None or self.last_turn is None:
            return False
        return self.first_turn <= turn <= self.last_turn


def step_spans(document: dict[str, Any]) -> list[StepSpan]:
    spans = []
    for position, step in enumerate(document.get("steps") or []):
        if not isinstance(step, dict):
            continue
        reward = step.get("reward")
        spans.append(
            StepSpan(
                position=position,
                name=str(step.get("name") or f"step {position}"),
                reward=reward if isinstance(reward, dict) else {},
                first_turn=_int(step.get("first_turn")),
                last_turn=_int(step.get("last_turn")),
                stop_reason=step.get("stop_reason"),
            )
        )
    return spans


def step_of(spans: Sequence[StepSpan], turn: Any) -> StepSpan | None:
    index = _int(turn)
    if index is None:
        return None
    return next((span for span in spans if span.holds(index)), None)


def steps_section(spans: list[StepSpan]) -> str:
    if not spans:
        return ""
    rows = [
        [
            f'<a href="#{span.anchor}">{e(span.name)}</a>'
            if span.first_turn is not None
            else e(span.name),
            reward_html(span.reward),
            turn_span(span),
            e(span.stop_reason or "not run (its setup failed)"),
            e(span.reward.get("reason")),
        ]
        for span in spans
    ]
    headers = ["step", "reward", "turns", "stop reason", "why"]
    return (
        f'<section id="steps"><h2>Steps ({len(spans)})</h2>'
        + table(headers, rows, cls="steps")
        + "</section>"
    )


def step_band(span: StepSpan) -> str:
    """The band that opens a step in the session, before its first turn."""
    return (
        f'<div class="step-band" id="{span.anchor}"><h3>'
        f'<a href="#{span.anchor}">step {span.position}: {e(span.name)}</a></h3>'
        f"<span>reward {reward_html(span.reward)}</span>"
        f"<span>turns {turn_span(span)}</span>"
        f"<span>stop {e(span.stop_reason)}</span></div>"
    )


def reward_html(reward: dict[str, Any]) -> str:
    if reward.get("valid"):
        return f"<strong>{number(reward.get('value'))}</strong>"
    return '<span class="invalid">invalid</span>'


def turn_span(span: StepSpan) -> str:
    if span.first_turn is None or span.last_turn is None:
        return '<span class="muted">no model call</span>'
    first, last = span.first_turn, span.last_turn
    link = f'<a href="#turn-{first}">{first}</a>'
    if last == first:
        return link
    return f'{link}..<a href="#turn-{last}">{last}</a> ({last - first + 1})'


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
