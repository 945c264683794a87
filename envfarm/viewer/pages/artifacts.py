"""The grading artifacts `envfarm run` keeps under ``OUT/artifacts/<episode_id>/``: the
workdir diff, the verifier's output, what inspection found, and a list of every other file.

The directory comes from the trajectory's ``artifacts`` field, resolved inside the run
directory only (a path that leads out of it is refused, not followed). Files are shown whole,
folded when long.
"""

from __future__ import annotations

from pathlib import Path

from envfarm.viewer.html import e, folded

SHOWN = (
    ("workspace/diff.patch", "workdir diff"),
    ("verifier/test-stdout.txt", "verifier output"),
    ("verifier/test-stderr.txt", "verifier errors"),
    ("verifier.json", "verifier run"),
    ("inspection.json", "inspection (flags and their evidence, files changed)"),
    ("reports.json", "parsed test reports"),
    ("collect.json", "collect hooks"),
    ("verifier-input.json", "what the verifier's container received"),
    ("build.log", "image build log"),
)
LISTED_AT_MOST = 300


def artifacts_dir(root: Path | None, relative: str | None) -> Path | None:
    if root is None or not relative:
        return None
    base = root.resolve()
    path = (base / relative).resolve()
    if not path.is_relative_to(base) or not path.is_dir():
        return None
    return path


def artifacts_section(root: Path | None, relative: str | None) -> str:
    head = '<section id="artifacts"><h2>Artifacts</h2>'
    if root is None:
        return head + '<p class="muted">artifacts are kept by `envfarm run` only</p></section>'
    path = artifacts_dir(root, relative)
    if path is None:
        what = f"{relative} is not in this run directory" if relative else "none were kept"
        return head + f'<p class="muted">{e(what)}</p></section>'
    blocks = []
    for name, label in SHOWN:
        file = path / name
        if file.is_file():
            text = file.read_text(encoding="utf-8", errors="replace")
            css = " diff" if name.endswith(".patch") else ""
            blocks.append(
                f'<div class="artifact{css}" id="artifact-{e(name.replace("/", "-"))}">'
                f"<h3>{e(label)} <span class=muted>{e(name)}</span></h3>"
                f"{folded(text, label=name, open_=name.endswith('.patch'))}</div>"
            )
    files = sorted(p for p in path.rglob("*") if p.is_file())
    listing = "".join(
        f"<li>{e(p.relative_to(path))} <span class=muted>{p.stat().st_size} B</span></li>"
        for p in files[:LISTED_AT_MOST]
    )
    more = (
        f"<li>… and {len(files) - LISTED_AT_MOST} more</li>" if len(files) > LISTED_AT_MOST else ""
    )
    return (
        head
        + f'<p class="muted">{e(relative)}</p>'
        + "".join(blocks)
        + f'<details class="fold"><summary>all files ({len(files)})</summary><ul>{listing}{more}'
        "</ul></details></section>"
    )
