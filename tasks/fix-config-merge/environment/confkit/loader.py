"""The layers put together."""

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confkit.defaults import DEFAULTS
from confkit.env import env_overrides
from confkit.merge import deep_merge
from confkit.parse import parse_text


def load_config(
    path: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Defaults, then the file at ``path`` (if any), then ``CONFKIT__*`` variables."""
    config = DEFAULTS
    if path is not None:
        config = deep_merge(config, parse_text(Path(path).read_text()))
    return deep_merge(config, env_overrides(os.environ if environ is None else environ))
