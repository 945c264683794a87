"""A run: headline figures, charts, the task table (reward distributions, pass@k), and the
episodes, filtered and paged (only the page shown is rendered)."""

from __future__ import annotations

from envfarm.viewer import svg
from envfarm.viewer.entries import Entry
from envfarm.viewer.html import chips, e, layout, number, seg, table, url
from envfarm.viewer.sources import Run
from envfarm.viewer.stats import (
    Filters,
    by_policy_version,
    groups_of,
    histogram,
    outcomes,
    pass_ks,
    phase_means,
    task_rows,
    valid_values,
)

PAGE_SIZE = 100


def run_page(base: str, run: Run, filters: Filters, page: int, refresh: int | None) -> str:
    home = f"{base}/runs/{seg(run.key)}"
    entries = run.entries
    chosen = [entry for entry in entries if filters.keep(entry)]
    parts = [_notes(run.notes), _headline(run, entries), _charts(entries)]
    parts.append("<h2>Tasks</h2>" + _task_table(home, entries))
    parts.append("<h2>Episodes</h2>" + _filter_form(home, entries, filters, refresh))
    parts.append(_episodes(base, run, chosen, filters, page, home, refresh))
    body = "".join(parts)
    if refresh:
        body = f'<p class="muted">following the run: this page reloads every {refresh} s</p>' + body
    html = layout(base, run.name, body)
    if refresh:
        html = html.replace("<head>", f'<head><meta http-equiv="refresh" content="{refresh}">', 1)
    return html


def _notes(notes: list[str]) -> str:
    if not notes:
        return ""
    return '<ul class="notes">' + "".join(f"<li>{e(n)}</li>" for n in notes) + "</ul>"


def _headline(run: Run, entries: list[Entry]) -> str:
    status = run.status()
    groups = groups_of(entries)
    zero = sum(1 for g in groups.values() if any(x.zero_variance for x in g))
    values = valid_values(entries)
    figures = {
        "status": e(status.status),
        "episodes": str(len(entries)),
        "valid": str(len(values)),
        "invalid": str(sum(1 for x in entries if not x.valid)),
        "infra errors": str(status.infra_errors),
        "flagged": str(sum(1 for x in entries if x.flags)),
        "groups": str(len(groups)),
        "zero-variance groups": str(zero),
        "mean reward": number(sum(values) / len(values) if values else None),
    }
    cells = "".join(
        f'<div class="figure"><div class="value">{v}</div><div class="label">{e(k)}</div></div>'
        for k, v in figures.items()
    )
    return f'<section class="figures">{cells}</section>'


def _charts(entries: list[Entry]) -> str:
    low, high, counts = histogram(valid_values(entries))
    phases = phase_means(entries)
    phase = (
        svg.phase_bar(phases)
        + f"<div>{svg.phase_legend()}</div>"
        + '<p class="muted">mean seconds per episode: '
        + ", ".join(f"{k.removesuffix('_s')} {v:.2f}" for k, v in phases.items())
        + "</p>"
        if phases
        else '<p class="muted">no timings</p>'
    )
    return (
        '<section class="charts">'
        f"<figure><figcaption>reward histogram</figcaption>{svg.histogram(low, high, counts)}"
        "</figure>"
        "<figure><figcaption>mean reward by policy version</figcaption>"
        f"{svg.version_chart(by_policy_version(entries))}</figure>"
        f"<figure><figcaption>time per phase</figcaption>{phase}</figure>"
        "</section>"
    )


def _task_table(home: str, entries: list[Entry]) -> str:
    rows = task_rows(entries)
    ks = pass_ks(rows)
    out = []
    for row in rows:
        _, _, counts = histogram(row.values)
        mean = number(row.mean)
        if row.std is not None:
            mean += f' <span class="muted">± {number(row.std)}</span>'
        out.append(
            [
                f'<a href="{e(url(home, task=row.task_id))}">{e(row.task_id)}</a>',
                str(row.episodes),
                str(row.valid),
                str(row.invalid),
                str(row.flagged),
                str(row.zero_variance_groups),
                mean,
                svg.sparkline(counts),
                *(number(row.pass_at(k)) for k in ks),
            ]
        )
    headers = ["task", "episodes", "valid", "invalid", "flagged", "zero-var groups", "mean reward"]
    headers += ["distribution", *(f"pass@{k}" for k in ks)]
    return table(headers, out, cls="tasks")


def _filter_form(home: str, entries: list[Entry], filters: Filters, refresh: int | None) -> str:
    def box(name: str, label: str, on: bool) -> str:
        checked = " checked" if on else ""
        return f'<label><input type="checkbox" name="{name}" value="1"{checked}> {label}</label>'

    tasks = sorted({x.task_id for x in entries})
    task_options = "".join(
        f'<option value="{e(t)}"{" selected" if t == filters.task else ""}>{e(t)}</option>'
        for t in tasks
    )
    outcome_options = "".join(
        f'<option value="{e(o)}"{" selected" if o == filters.outcome else ""}>{e(o)} ({n})</option>'
        for o, n in outcomes(entries).items()
    )
    follow = f'<input type="hidden" name="refresh" value="{refresh}">' if refresh else ""
    group = (
        f'<input type="hidden" name="group" value="{e(filters.group)}">' if filters.group else ""
    )
    return (
        f'<form class="filters" method="get" action="{e(home)}">'
        + box("flagged", "flagged", filters.flagged)
        + box("invalid", "invalid", filters.invalid)
        + box("zero_variance", "zero-variance", filters.zero_variance)
        + f'<label>task <select name="task"><option value="">all</option>{task_options}'
        "</select></label>" + f'<label>outcome <select name="outcome"><option value="">all</option>'
        f"{outcome_options}</select></label>"
        + follow
        + group
        + '<button type="submit">filter</button>'
        + f' <a href="{e(home)}">clear</a>'
        + f' · <a href="{e(url(home, refresh=5))}">follow the run</a></form>'
    )


def _episodes(
    base: str,
    run: Run,
    chosen: list[Entry],
    filters: Filters,
    page: int,
    home: str,
    refresh: int | None,
) -> str:
    pages = max(1, -(-len(chosen) // PAGE_SIZE))
    page = min(max(page, 1), pages)
    shown = chosen[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
    rows = [_episode_row(base, run, entry) for entry in shown]
    what = (
        f"{len(chosen)} of {len(run.entries)} episodes"
        if filters.active()
        else (f"{len(chosen)} episodes")
    )
    pager = ""
    if pages > 1:
        query = {
            "flagged": filters.flagged,
            "invalid": filters.invalid,
            "zero_variance": filters.zero_variance,
            "task": filters.task,
            "outcome": filters.outcome,
            "group": filters.group,
            "refresh": refresh,
        }
        links = []
        if page > 1:
            links.append(
                f'<a rel="prev" href="{e(url(home, page=page - 1, **query))}">previous</a>'
            )
        links.append(f"page {page} of {pages}")
        if page < pages:
            links.append(f'<a rel="next" href="{e(url(home, page=page + 1, **query))}">next</a>')
        pager = '<p class="pager">' + " · ".join(links) + "</p>"
    headers = ["trajectory", "task", "group", "reward", "advantage", "turns", "outcome", "flags"]
    return f'<p class="muted">{what}</p>' + table(headers, rows, cls="episodes") + pager


def _episode_row(base: str, run: Run, entry: Entry) -> list[str]:
    home = f"{base}/runs/{seg(run.key)}"
    reward = number(entry.value) if entry.valid else '<span class="invalid">invalid</span>'
    outcome = e(entry.outcome)
    if entry.error_type:
        outcome += f' <span class="muted">{e(entry.error_type)}</span>'
    return [
        f'<a class="trajectory" href="{e(home)}/t/{seg(entry.trajectory_id)}">'
        f"{e(entry.trajectory_id)}</a>",
        e(entry.task_id),
        f'<a href="{e(home)}/groups/{seg(entry.group_id)}">{e(entry.group_id[-12:])}</a>'
        + (' <span class="chip zero">zero-var</span>' if entry.zero_variance else ""),
        reward,
        number(entry.advantage),
        str(entry.turns),
        outcome,
        chips(entry.flags, "chip flag"),
    ]
