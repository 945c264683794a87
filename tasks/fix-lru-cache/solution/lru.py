"""A fixed-capacity cache that evicts the least recently used entry."""

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any


class LRUCache:
    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise ValueError(f"capacity must be an int >= 0, got {capacity!r}")
        self.capacity = capacity
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self._hits = 0
        self._misses = 0
        self._evictions = 0

    def get(self, key: Hashable, default: Any = None) -> Any:
        if key in self._data:
            self._hits += 1
            self._data.move_to_end(key)
            return self._data[key]
        self._misses += 1
        return default

    def put(self, key: Hashable, value: Any) -> None:
        if key in self._data:
            self._data[key] = value
            self._data.move_to_end(key)
            return
        if self.capacity == 0:
            return
        if len(self._data) >= self.capacity:
            self._data.popitem(last=False)
            self._evictions += 1
        self._data[key] = value

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def keys(self) -> list[Hashable]:
        return list(self._data)

    def stats(self) -> dict[str, int]:
        return {"hits": self._hits, "misses": self._misses, "evictions": self._evictions}
