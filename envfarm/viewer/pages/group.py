"""A GRPO group: its N trajectories side by side (reward, advantage, turns, flags, outcome)."""

from __future__ import annotations

import statistics

from envfarm.viewer import svg
from envfarm.viewer.entries import PHASES, Entry
from envfarm.viewer.html import chips, definition, e, layout, number, seconds, seg
from envfarm.viewer.sources import Run
from envfarm.viewer.stats import valid_values


def group_page(base: str, run: Run, group_id: str, members: list[Entry]) -> str:
    home = f"{base}/runs/{seg(run.key)}"
    values = valid_values(members)
    meta = run.groups.get(group_id)
    facts = {
        "task": e(members[0].task_id if members else "?"),
        "trajectories": str(len(members)),
        "valid rewards": str(len(values)),
        "mean reward": number(statistics.fmean(values) if values else None),
        "std": number(statistics.pstdev(values) if len(values) > 1 else None),
        "zero variance": e(members[0].zero_variance if members else None),
    }
    if meta is not None:
        facts["cursor"] = str(meta.cursor)
        facts["dispatch version"] = e(meta.dispatch_version)
        facts["staleness"] = e(meta.staleness)
        facts["stale"] = e(meta.stale)
    scale = max((sum((m.timings.get(p) or 0.0) for p in PHASES) for m in members), default=0.0)
    cards = "".join(_card(home, m, scale) for m in members)
    body = (
        definition(facts)
        + f"<div>{svg.phase_legend()}</div>"
        + f'<section class="side-by-side">{cards}</section>'
    )
    crumbs = [(run.name, home), (f"group {group_id}", f"{home}/groups/{seg(group_id)}")]
    return layout(base, f"group {group_id}", body, crumbs=crumbs)


def _card(home: str, entry: Entry, scale: float) -> str:
    reward = number(entry.value) if entry.valid else '<span class="invalid">invalid</span>'
    facts = {
        "reward": reward,
        "advantage": number(entry.advantage),
        "turns": str(entry.turns),
        "outcome": e(entry.outcome),
        "attempt": str(entry.attempt),
        "policy version": e(entry.policy_version),
        "total": seconds(entry.timings.get("total_s")),
    }
    if entry.reason:
        facts["reason"] = e(entry.reason)
    if entry.error_type:
        facts["error"] = e(entry.error_type)
    return (
        f'<article class="card{" flagged" if entry.flags else ""}">'
        f'<h3><a class="trajectory" href="{e(home)}/t/{seg(entry.trajectory_id)}">'
        f"{e(entry.trajectory_id)}</a></h3>"
        + definition(facts)
        + (f"<p>{chips(entry.flags, 'chip flag')}</p>" if entry.flags else "")
        + svg.phase_bar(entry.timings, width=240, scale=scale or None)
        + "</article>"
    )
