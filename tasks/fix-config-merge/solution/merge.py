"""Merging configuration layers."""

import copy
from typing import Any


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Return ``base`` updated with ``override``: nested tables merge key by key, anything
    else (numbers, strings, lists) in ``override`` replaces the value in ``base``. The result
    shares no mutable value with its inputs, which are left unchanged."""
    result = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = deep_merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result
