"""Merging configuration layers."""

from typing import Any


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Return ``base`` updated with ``override``: nested tables merge key by key, anything
    else (numbers, strings, lists) in ``override`` replaces the value in ``base``."""
    result = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = deep_merge(result[key], value)
            result[key].update(value)
        else:
            result[key] = value
    return result
