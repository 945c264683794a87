"""Where a base image comes from, in order: the resolution order of docs/images.md.

``local`` (an image the engine holds under the name as written, or its normalised name), then
``pull`` (through the engine, with the user's registry credentials, when the registry answers),
then ``aliases`` (the offline substitutes of ``images/aliases.toml``). ``ENVFARM_IMAGE_SOURCES``
sets another order or a subset (``aliases,local``: public names always resolve to envfarm's
recipes, whatever the engine holds under them, as envfarm's own test suite runs).
``ENVFARM_OFFLINE=1`` (``--offline`` on ``run`` and ``check``) drops ``pull``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal, cast

from envfarm.errors import ImageError

Source = Literal["local", "pull", "aliases"]
SOURCES: tuple[Source, ...] = ("local", "pull", "aliases")
SOURCES_ENV = "ENVFARM_IMAGE_SOURCES"
OFFLINE_ENV = "ENVFARM_OFFLINE"
_TRUE = {"1", "true", "yes", "on"}


def offline(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return env.get(OFFLINE_ENV, "").strip().lower() in _TRUE


def set_offline() -> None:
    """What ``--offline`` does: for this process and every process it starts."""
    os.environ[OFFLINE_ENV] = "1"


def image_sources(env: Mapping[str, str] | None = None) -> list[Source]:
    """The sources to try, in order (``pull`` left out when offline)."""
    env = os.environ if env is None else env
    text = env.get(SOURCES_ENV, "").strip()
    names = [part.strip() for part in text.split(",") if part.strip()] if text else SOURCES
    unknown = [name for name in names if name not in SOURCES]
    if unknown or len(set(names)) != len(names):
        raise ImageError(
            f"{SOURCES_ENV}={text!r}: expected a comma-separated order of "
            f"{', '.join(SOURCES)}, each at most once"
        )
    return [cast(Source, name) for name in names if not (name == "pull" and offline(env))]
