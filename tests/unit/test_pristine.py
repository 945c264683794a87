"""The pristine-state cache: what it keeps, what it drops, and one taker per key."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from envfarm.grading.cleanroom.carry import Listing, plan_changes
from envfarm.grading.pristine import (
    Pristine,
    PristineCache,
    image_entries,
    pristine_key,
    without_solution,
)
from envfarm.grading.tamper.snapshot import Snapshot

ODD = "usr/share/caf\udce9"  # a name that is not UTF-8, as the listing decodes it


def listing() -> Listing:
    entries = {"etc/passwd": ("f", 100.0), ODD: ("f", 100.0), "run/started": ("f", 999.5)}
    return Listing("/app", 1000.0, entries, ["etc/hosts"], started=1000.0)


def test_entries_younger_than_the_listed_container_are_late() -> None:
    kept = image_entries(listing())
    assert kept is not None
    assert set(kept.entries) == {"etc/passwd", ODD, "run/started"}
    assert kept.late == {"run/started"}
    assert image_entries(Listing("/app", 1000.0, {}, [])) is None  # start unknown: no cache


def test_a_late_entry_counts_as_changed_by_its_ctime_alone() -> None:
    kept = image_entries(listing())
    assert kept is not None
    before = replace(kept, now=2000.0)
    entries = {"etc/passwd": ("f", 100.0), "run/started": ("d", 999.5), "run/new": ("f", 2500.0)}
    plan = plan_changes(before, Listing("/app", 3000.0, entries, []))
    assert plan.carry == ["run/new"]  # not run/started: late, and unchanged since the start
    assert plan.delete == [ODD]  # nor is it deleted for being of another type
    entries["run/started"] = ("d", 2500.0)  # changed in this episode: replaced
    plan = plan_changes(before, Listing("/app", 3000.0, entries, []))
    assert plan.carry == ["run/new", "run/started"]
    assert plan.delete == ["run/started", ODD]


def test_a_state_survives_the_disk_and_a_fresh_process(tmp_path: Path) -> None:
    kept = image_entries(listing())
    snapshot = Snapshot(workdir="/app", now=1.0, sections={"site": {"/x.pth": "ab" * 32}})
    PristineCache(tmp_path).settle("k", Pristine(kept, snapshot, b"tar bytes"))
    found = asyncio.run(PristineCache(tmp_path).lookup("k"))
    assert found is not None
    assert found.listing is not None
    assert kept is not None
    assert found.listing.entries == kept.entries
    assert found.listing.mounts == ["etc/hosts"]
    assert found.listing.late == kept.late
    assert found.snapshot == snapshot
    assert found.baseline == b"tar bytes"
    (tmp_path / "k.tar").unlink()  # a state whose workdir copy is gone is a miss, not a None copy
    assert asyncio.run(PristineCache(tmp_path).lookup("k")) is None


def test_concurrent_episodes_of_one_key_wait_for_the_first() -> None:
    async def scenario() -> list[Pristine | None]:
        cache = PristineCache(None)
        assert await cache.lookup("k") is None  # the first takes it
        waiting = [asyncio.ensure_future(cache.lookup("k")) for _ in range(3)]
        await asyncio.sleep(0)
        assert not any(w.done() for w in waiting)
        cache.settle("k", Pristine(None, None, None))
        return list(await asyncio.gather(*waiting))

    assert all(found is not None for found in asyncio.run(scenario()))


def test_a_failed_taker_hands_the_key_to_the_next() -> None:
    async def scenario() -> Pristine | None:
        cache = PristineCache(None)
        assert await cache.lookup("k") is None
        second = asyncio.ensure_future(cache.lookup("k"))
        await asyncio.sleep(0)
        cache.settle("k", None)
        return await second

    assert asyncio.run(scenario()) is None  # the second takes it itself


@pytest.mark.parametrize("flag", ["listing", "snapshot", "baseline", "solution"])
def test_the_key_covers_what_the_episode_takes(flag: str) -> None:
    flags = dict.fromkeys(("listing", "snapshot", "baseline", "solution"), False)
    base = pristine_key("sha256:1", "hash", "/app", **flags)
    assert pristine_key("sha256:1", "hash", "/app", **(flags | {flag: True})) != base
    assert pristine_key("sha256:2", "hash", "/app", **flags) != base
    assert pristine_key("sha256:1", "other", "/app", **flags) != base


def test_peeking_waits_for_the_taker_and_never_takes_the_key() -> None:
    async def scenario() -> tuple[Pristine | None, Pristine | None, Pristine | None]:
        cache = PristineCache(None)
        absent = await cache.peek("k")
        assert await cache.lookup("k") is None  # peeking left it to be taken
        peeking = asyncio.ensure_future(cache.peek("k"))
        await asyncio.sleep(0)
        assert not peeking.done()
        cache.settle("k", Pristine(None, None, None))
        return absent, await peeking, await cache.peek("k")

    absent, waited, later = asyncio.run(scenario())
    assert absent is None
    assert waited is not None
    assert later is waited


def test_without_the_solution_only_the_solution_lines_change() -> None:
    hidden = {"/solution/solve.sh": "a" * 64, "/tests/test.sh": "b" * 64}
    snapshot = Snapshot(workdir="/app", sections={"hidden": hidden, "site": {"/x.pth": "c" * 64}})
    oracle = Pristine(None, snapshot, b"tar")
    own = {"/solution/notes.txt": "d" * 64}
    adapted = without_solution(oracle, own)
    assert adapted is not None
    assert adapted.snapshot is not None
    assert adapted.snapshot.section("hidden") == {"/tests/test.sh": "b" * 64, **own}
    assert adapted.snapshot.section("site") == snapshot.section("site")
    assert adapted.baseline == b"tar"
    assert oracle.snapshot is snapshot
    assert snapshot.section("hidden") == hidden
    full = {f"/tests/t{i}": "e" * 64 for i in range(1999)}
    crowded = Pristine(None, Snapshot(workdir="/app", sections={"hidden": full}), None)
    assert without_solution(crowded, own) is None  # the cap could hide a file of either
