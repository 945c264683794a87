"""Hidden tests for /app/lru.py."""

import importlib
import random
import sys
from types import ModuleType

import pytest

APP_DIR = "/app"


@pytest.fixture
def lru() -> ModuleType:
    if APP_DIR not in sys.path:
        sys.path.insert(0, APP_DIR)
    sys.modules.pop("lru", None)
    return importlib.import_module("lru")


def test_basic_get_and_put(lru):
    cache = lru.LRUCache(2)
    cache.put("a", 1)
    assert cache.get("a") == 1
    assert cache.get("zz") is None
    assert cache.get("zz", "fallback") == "fallback"
    assert cache.stats() == {"hits": 1, "misses": 2, "evictions": 0}


def test_least_recently_inserted_is_evicted(lru):
    cache = lru.LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("c", 3)
    assert "a" not in cache
    assert cache.keys() == ["b", "c"]
    assert cache.stats()["evictions"] == 1


def test_get_refreshes_recency(lru):
    cache = lru.LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1
    cache.put("c", 3)
    assert cache.keys() == ["a", "c"]
    assert cache.get("b") is None


def test_updating_a_key_refreshes_it_and_never_evicts(lru):
    cache = lru.LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    assert len(cache) == 2
    assert cache.keys() == ["b", "a"]
    assert cache.stats()["evictions"] == 0
    cache.put("c", 3)
    assert cache.keys() == ["a", "c"]
    assert cache.get("a") == 10


def test_repeated_updates_do_not_corrupt_the_order(lru):
    cache = lru.LRUCache(3)
    for value in range(5):
        cache.put("hot", value)
    cache.put("x", 1)
    cache.put("y", 2)
    cache.put("z", 3)
    assert cache.keys() == ["x", "y", "z"]
    assert len(cache) == 3
    assert cache.stats()["evictions"] == 1


def test_contains_and_len_do_not_touch_recency_or_stats(lru):
    cache = lru.LRUCache(2)
    cache.put("a", None)
    cache.put("b", 0)
    assert "a" in cache
    assert "b" in cache
    assert "c" not in cache
    assert len(cache) == 2
    assert cache.stats() == {"hits": 0, "misses": 0, "evictions": 0}
    cache.put("c", 3)
    assert cache.keys() == ["b", "c"]


def test_none_values_are_stored(lru):
    cache = lru.LRUCache(1)
    cache.put("k", None)
    assert "k" in cache
    assert cache.get("k", "default") is None
    assert cache.stats()["hits"] == 1


def test_capacity_zero_stores_nothing(lru):
    cache = lru.LRUCache(0)
    cache.put("a", 1)
    assert len(cache) == 0
    assert "a" not in cache
    assert cache.keys() == []
    assert cache.get("a") is None


@pytest.mark.parametrize("bad", [-1, 2.5, "3", None])
def test_invalid_capacity_is_rejected(lru, bad):
    with pytest.raises(ValueError):  # noqa: PT011 - the message is unspecified
        lru.LRUCache(bad)


def test_random_operations_agree_with_a_reference_model(lru):
    rng = random.Random(99)
    for capacity in (1, 2, 3, 5):
        cache = lru.LRUCache(capacity)
        order: list[int] = []
        values: dict[int, int] = {}
        stats = {"hits": 0, "misses": 0, "evictions": 0}
        for step in range(500):
            key = rng.randint(0, 7)
            if rng.random() < 0.5:
                cache.put(key, step)
                if key in values:
                    order.remove(key)
                elif len(order) == capacity:
                    del values[order.pop(0)]
                    stats["evictions"] += 1
                order.append(key)
                values[key] = step
            else:
                got = cache.get(key, -1)
                if key in values:
                    order.remove(key)
                    order.append(key)
                    stats["hits"] += 1
                    assert got == values[key]
                else:
                    stats["misses"] += 1
                    assert got == -1
            assert cache.keys() == order, (capacity, step)
        assert cache.stats() == stats
