"""A fixed-capacity cache that evicts the least recently used entry."""

from collections.abc import Hashable
from typing import Any


class LRUCache:
    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError("capacity must be >= 0")
        self.capacity = capacity
        self._data: dict[Hashable, Any] = {}
        self._order: list[Hashable] = []
        self._hits = 0
        self._misses = 0
        self._evictions = 0

    def get(self, key: Hashable, default: Any = None) -> Any:
        if key in self._data:
            self._hits += 1
            return self._data[key]
        self._misses += 1
        return default

    def put(self, key: Hashable, value: Any) -> None:
        self._data[key] = value
        self._order.append(key)
        if len(self._order) > self.capacity:
            oldest = self._order.pop(0)
            self._data.pop(oldest, None)
            self._evictions += 1

    def __contains__(self, key: Hashable) -> bool:
        return self.get(key) is not None

    def __len__(self) -> int:
        return len(self._data)

    def keys(self) -> list[Hashable]:
        return list(self._order)

    def stats(self) -> dict[str, int]:
        return {"hits": self._hits, "misses": self._misses, "evictions": self._evictions}
