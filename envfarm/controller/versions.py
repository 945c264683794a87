"""Policy versions: what the trainer published, and how versions are ordered.

The trainer publishes each new version (``PUT /v1/policy-version``) to a ``PolicyVersionBoard``.
A turn whose response names no version is stamped with the board's latest one; the CLI has no
board, so such turns stay null. Versions that are all numbers order numerically ("9" < "10");
otherwise by publication order, with versions the board never saw after the published ones, in
the order they first appear.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from envfarm.models.trajectory import PolicyVersions


def _number(version: str) -> float | None:
    try:
        value = float(version)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


class PolicyVersionBoard:
    """The versions the trainer published, in order; ``current`` is the latest."""

    def __init__(self) -> None:
        self._order: dict[str, int] = {}
        self.current: str | None = None

    def publish(self, version: str) -> None:
        """Make ``version`` current; a version published before keeps its original place."""
        if not version:
            raise ValueError("a policy version must be a non-empty string")
        self._order.setdefault(version, len(self._order))
        self.current = version

    def latest(self) -> str | None:
        """The current version (a ``version_source`` for policy clients)."""
        return self.current

    def position(self, version: str) -> int | None:
        return self._order.get(version)


def version_range(
    versions: Iterable[str | None], board: PolicyVersionBoard | None = None
) -> PolicyVersions:
    """The min and max of ``versions`` (nulls ignored) under the ordering above."""
    seen = list(dict.fromkeys(v for v in versions if v is not None))
    if not seen:
        return PolicyVersions()
    numbers = [_number(v) for v in seen]
    if all(n is not None for n in numbers):
        ranked = sorted(zip(numbers, seen, strict=True), key=lambda pair: pair[0] or 0.0)
        return PolicyVersions(min=ranked[0][1], max=ranked[-1][1])

    def rank(item: tuple[int, str]) -> tuple[int, int]:
        appearance, version = item
        published = board.position(version) if board is not None else None
        return (0, published) if published is not None else (1, appearance)

    ordered = sorted(enumerate(seen), key=rank)
    return PolicyVersions(min=ordered[0][1], max=ordered[-1][1])
