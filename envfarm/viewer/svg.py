"""Charts as inline SVG, drawn on the server: nothing to load, nothing to build.

Colours come from classes in ``viewer.css`` (the pages' Content-Security-Policy allows no
inline styles), sizes from SVG attributes; every bar carries a ``<title>`` for its figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape

from envfarm.viewer.entries import PHASES


def histogram(low: float, high: float, counts: list[int], *, width: int = 320) -> str:
    height, pad = 120, 18
    most = max(counts) or 1
    step = (width - 2 * pad) / len(counts)
    bars = []
    span = (high - low) / len(counts)
    for i, count in enumerate(counts):
        h = (height - 2 * pad) * count / most
        x = pad + i * step
        title = f"{low + i * span:.2f} to {low + (i + 1) * span:.2f}: {count}"
        bars.append(
            f'<rect class="bar" x="{x:.1f}" y="{height - pad - h:.1f}" width="{step - 2:.1f}" '
            f'height="{h:.1f}"><title>{escape(title)}</title></rect>'
        )
    axis = (
        f'<line class="axis" x1="{pad}" y1="{height - pad}" x2="{width - pad}" '
        f'y2="{height - pad}"/>'
        f'<text x="{pad}" y="{height - 4}">{low:g}</text>'
        f'<text x="{width - pad}" y="{height - 4}" text-anchor="end">{high:g}</text>'
        f'<text x="{pad}" y="12">{most}</text>'
    )
    return _svg(width, height, "reward histogram", "".join(bars) + axis)


def sparkline(counts: list[int], *, width: int = 80, height: int = 18) -> str:
    most = max(counts) or 1
    step = width / len(counts)
    bars = "".join(
        f'<rect class="bar" x="{i * step:.1f}" y="{height - height * c / most:.1f}" '
        f'width="{max(step - 1, 1):.1f}" height="{height * c / most:.1f}"/>'
        for i, c in enumerate(counts)
    )
    return _svg(width, height, "reward distribution", bars)


def version_chart(points: list[tuple[str, float, int]], *, width: int = 420) -> str:
    """Mean reward per policy version, left to right."""
    height, pad = 140, 24
    if not points:
        return '<p class="muted">no valid rewards yet</p>'
    low = min(0.0, *(p[1] for p in points))
    high = max(1.0, *(p[1] for p in points))
    step = (width - 2 * pad) / max(len(points), 1)
    marks = []
    previous: tuple[float, float] | None = None
    for i, (version, mean, n) in enumerate(points):
        x = pad + step * (i + 0.5)
        y = height - pad - (height - 2 * pad) * (mean - low) / (high - low)
        if previous is not None:
            marks.append(
                f'<line class="trend" x1="{previous[0]:.1f}" y1="{previous[1]:.1f}" '
                f'x2="{x:.1f}" y2="{y:.1f}"/>'
            )
        marks.append(
            f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="4">'
            f"<title>{escape(version)}: mean {mean:.3f} over {n}</title></circle>"
        )
        if len(points) <= 12:
            marks.append(
                f'<text x="{x:.1f}" y="{height - 6}" text-anchor="middle">'
                f"{escape(version[:10])}</text>"
            )
        previous = (x, y)
    axis = (
        f'<line class="axis" x1="{pad}" y1="{height - pad}" x2="{width - pad}" '
        f'y2="{height - pad}"/><text x="2" y="{pad}">{high:g}</text>'
        f'<text x="2" y="{height - pad}">{low:g}</text>'
    )
    return _svg(width, height, "mean reward by policy version", axis + "".join(marks))


def phase_bar(
    timings: Mapping[str, float | None], *, width: int = 420, scale: float | None = None
) -> str:
    """One stacked bar of the phases; ``scale``: seconds the full width stands for."""
    height = 22
    total = scale or sum((timings.get(p) or 0.0) for p in PHASES) or 1.0
    x = 0.0
    parts = []
    for phase in PHASES:
        seconds = timings.get(phase) or 0.0
        w = width * seconds / total
        if w <= 0:
            continue
        name = phase.removesuffix("_s")
        parts.append(
            f'<rect class="phase-{name}" x="{x:.1f}" y="2" width="{w:.1f}" height="{height - 4}">'
            f"<title>{name}: {seconds:.2f} s</title></rect>"
        )
        x += w
    return _svg(width, height, "time per phase", "".join(parts))


def phase_legend() -> str:
    return "".join(
        f'<span class="legend"><span class="swatch phase-{p.removesuffix("_s")}"></span>'
        f"{p.removesuffix('_s')}</span>"
        for p in PHASES
    )


def _svg(width: int, height: int, label: str, body: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(label)}">{body}</svg>'
    )
