"""A deterministic rubric judge for tests, served with ``PolicyServer``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from envfarm.grading.rubric.judges import requested_item
from envfarm.policy.server import Reply, error_reply
from envfarm.testing.scripted import ScriptedResponder, Step


@dataclass
class ScriptedJudge:
    """A deterministic judge for tests: one ``ScriptedResponder`` per rubric item.

    Serve it with ``PolicyServer``. Requests are routed by the item they are about, so the
    scripts do not depend on the order in which concurrent item requests arrive.
    """

    scripts: Mapping[str, Iterable[Step]]
    items: dict[str, ScriptedResponder] = field(init=False)

    def __post_init__(self) -> None:
        self.items = {name: ScriptedResponder(steps) for name, steps in self.scripts.items()}

    def requests(self, item: str) -> list[dict[str, Any]]:
        return self.items[item].requests

    async def __call__(self, request: dict[str, Any]) -> Reply:
        name = requested_item(request)
        if name is None or name not in self.items:
            return error_reply(400, f"the scripted judge has no script for rubric item {name!r}")
        return await self.items[name](request)
