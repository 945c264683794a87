"""Where a base image comes from, in order: the resolution order of docs/images.md.

``local`` (an image the engine holds under the name as written, or its normalised name), then
``pull`` (through the engine, with the user's registry credentials, when the registry answers),
then ``aliases`` (the offline substitutes of ``images/aliases.toml``). ``ENVFARM_IMAGE_SOURCES``
sets another order or a subset (``aliases,local``: public names always resolve to envfarm's
recipes, whatever the engine holds under them, as envfarm's own test suite runs).
``ENVFARM_OFFLINE=1`` (``--offline`` on ``run`` and ``check``) drops ``pull``. Both are read
by ``envfarm.settings``; a command's flags reach the backend as ``Settings.sources()``.
"""

from __future__ import annotations

from collections.abc import Mapping

from envfarm.settings import IMAGE_SOURCES, ImageSource, Settings

Source = ImageSource
SOURCES = IMAGE_SOURCES


def offline(env: Mapping[str, str] | None = None) -> bool:
    return Settings.from_env(env).offline


def image_sources(env: Mapping[str, str] | None = None) -> list[Source]:
    """The sources to try, in order (``pull`` left out when offline)."""
    return Settings.from_env(env).sources()
