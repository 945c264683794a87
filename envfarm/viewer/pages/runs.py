"""The first page: every run (or job) with its status, progress, rate, mean reward, errors."""

from __future__ import annotations

from envfarm.viewer.html import e, layout, number, seg, table
from envfarm.viewer.sources import Run


def runs_page(base: str, runs: list[Run], *, title: str) -> str:
    rows = []
    for run in runs:
        status = run.status()
        progress = str(status.done)
        if status.episodes_expected is not None:
            progress += f" / {status.episodes_expected}"
        rate = "-" if status.rate is None else f"{status.rate:.2f}"
        rows.append(
            [
                f'<a class="run" href="{e(base)}/runs/{seg(run.key)}">{e(run.name)}</a>',
                f'<span class="status status-{e(status.status.split(" ")[0])}">'
                f"{e(status.status)}</span> <span class=muted>{e(status.detail)}</span>",
                progress,
                rate,
                number(status.mean_reward),
                str(status.infra_errors),
            ]
        )
    body = (
        table(["run", "status", "episodes", "episodes/s", "mean reward", "infra errors"], rows)
        if rows
        else '<p class="muted">no runs yet</p>'
    )
    return layout(base, title, body)
