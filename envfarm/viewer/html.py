"""Small helpers for writing pages: escaping, the layout, links, folding of long text.

Everything a run holds is untrusted text (the model wrote much of it), so every value goes
through ``escape`` and the pages run under a Content-Security-Policy without inline scripts
or styles. Long text is folded in ``<details>``, never cut: the whole of it is on the page.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

FOLD_LINES = 24
FOLD_CHARS = 3000
PREVIEW_LINES = 6


def e(value: Any) -> str:
    return escape("" if value is None else str(value))


def layout(base: str, title: str, body: str, *, crumbs: Iterable[tuple[str, str]] = ()) -> str:
    links = [f'<a href="{e(href)}">{e(text)}</a>' for text, href in crumbs]
    trail = " / ".join([f'<a href="{e(base)}/">runs</a>', *links])
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)} · envfarm</title>"
        f'<link rel="stylesheet" href="{e(base)}/static/viewer.css">'
        f'<link rel="icon" href="{e(base)}/static/favicon.svg">'
        f"</head><body><header><nav>{trail}</nav></header><main><h1>{e(title)}</h1>{body}"
        "</main></body></html>"
    )


def url(path: str, **query: Any) -> str:
    params = {k: v for k, v in query.items() if v not in (None, False, "")}
    params = {k: ("1" if v is True else v) for k, v in params.items()}
    return path + ("?" + urlencode(params) if params else "")


def seg(text: str) -> str:
    """A path segment."""
    return quote(text, safe="")


def number(value: float | None, digits: int = 3) -> str:
    if value is None:
        return '<span class="muted">-</span>'
    text = f"{value:.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def seconds(value: float | None) -> str:
    return '<span class="muted">-</span>' if value is None else f"{value:.2f} s"


def table(headers: Iterable[str], rows: Iterable[Iterable[str]], *, cls: str = "") -> str:
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def folded(text: str, *, label: str = "output", open_: bool = False) -> str:
    """``text`` in a ``<pre>``; when long, folded under a summary saying how long it is."""
    lines = len(text.splitlines())
    if lines <= FOLD_LINES and len(text) <= FOLD_CHARS:
        return f'<pre class="text">{e(text)}</pre>'
    preview = "\n".join(text.splitlines()[:PREVIEW_LINES])
    size = f"{lines} lines, {_bytes(len(text.encode()))}"
    return (
        f'<pre class="text preview">{e(preview)}</pre>'
        f'<details class="fold"{" open" if open_ else ""}><summary>{e(label)}: {size} (show all)'
        f'</summary><pre class="text">{e(text)}</pre></details>'
    )


def pretty_json(raw: str) -> str:
    """A tool call's raw arguments, indented when they are JSON (as written otherwise)."""
    try:
        return json.dumps(json.loads(raw), indent=2, ensure_ascii=False)
    except ValueError:
        return raw


def chips(items: Iterable[str], cls: str = "chip") -> str:
    return "".join(f'<span class="{cls}">{e(i)}</span>' for i in items)


def definition(pairs: Mapping[str, str]) -> str:
    return "<dl>" + "".join(f"<dt>{e(k)}</dt><dd>{v}</dd>" for k, v in pairs.items()) + "</dl>"


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB"):
        if n < 1024:
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n:.1f} GB"
