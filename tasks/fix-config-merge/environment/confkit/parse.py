"""Reading ``key.sub = value`` configuration files and typed values."""

from typing import Any

_TRUE = {"true", "yes", "on"}
_FALSE = {"false", "no", "off"}


def parse_value(text: str) -> Any:
    """``42`` -> 42, ``2.5`` -> 2.5, ``yes``/``no`` -> bool, ``none`` -> None,
    ``a, b`` -> ["a", "b"], ``"quoted"`` -> the text inside the quotes."""
    text = text.strip()
    lowered = text.lower()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    if lowered == "none":
        return None
    if "," in text:
        return [parse_value(part) for part in text.split(",") if part.strip()]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def set_dotted(table: dict[str, Any], dotted: str, value: Any) -> None:
    """``set_dotted(t, "server.tls.cert", v)`` creates the nested tables as needed."""
    *parents, last = [part.strip() for part in dotted.split(".")]
    for part in parents:
        table = table.setdefault(part, {})
    table[last] = value


def parse_text(text: str) -> dict[str, Any]:
    """Parse a whole file: one ``dotted.key = value`` per line; ``#`` starts a comment."""
    table: dict[str, Any] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"line {number}: expected `key = value`, got {raw!r}")
        set_dotted(table, key, parse_value(value))
    return table
