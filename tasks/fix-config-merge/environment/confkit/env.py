"""Overrides from environment variables: ``CONFKIT__SERVER__PORT=9000``."""

from collections.abc import Mapping
from typing import Any

from confkit.parse import parse_value, set_dotted

PREFIX = "CONFKIT__"


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for name, value in environ.items():
        if name.startswith(PREFIX):
            dotted = name[len(PREFIX) :].lower().replace("__", ".")
            set_dotted(table, dotted, parse_value(value))
    return table
