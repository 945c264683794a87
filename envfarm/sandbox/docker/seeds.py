"""What a forked environment starts from (``fork.py``), as its surroundings see it."""

from __future__ import annotations

from typing import Protocol


class VolumeSeed(Protocol):
    """A frozen environment whose volumes a new one's start as copies of, and whose copies
    share one outbound network (``fork.py``)."""

    parent_id: str

    async def copy_volumes(self, pairs: list[tuple[str, str]]) -> None:
        """Fill each empty volume ``to`` of ``pairs`` with the contents of ``from``."""
        ...

    async def outbound_network(self, env_id: str) -> str:
        """The name of the outbound network the copies share (``networks.py``)."""
        ...

    async def release_outbound(self, env_id: str, containers: list[str]) -> None:
        """``env_id``'s containers (these names) are gone from the shared outbound network."""
        ...
