"""Clean-room carry, pure parts: which entries of the agent's file system the verifier receives
(paths relative to ``/``), and the host's check of the archive a (possibly replaced) tar made."""

from __future__ import annotations

import io
import tarfile

from envfarm.grading.cleanroom.carry import (
    Listing,
    check_archive,
    parse_entries,
    plan_changes,
)
from envfarm.grading.cleanroom.receive import carried_copies
from envfarm.grading.cleanroom.scope import CarryScope
from envfarm.grading.verifier.collect import CopiedPath

START = 1_700_000_000.0
OLD, NEW = START - 3600, START + 60


def listing(**entries: tuple[str, float]) -> Listing:
    return named(dict(entries))


def named(entries: dict[str, tuple[str, float]]) -> Listing:
    """Entries of the workdir /app (relative to it, as written in the tests)."""
    rooted = {"app": ("d", OLD)} | {f"app/{p}": e for p, e in entries.items()}
    return Listing(workdir="/app", now=START, entries=rooted)


def rooted(entries: dict[str, tuple[str, float]]) -> Listing:
    return Listing(workdir="/app", now=START, entries=entries)


def app(*paths: str) -> list[str]:
    return [f"app/{p}" for p in paths]


def test_changed_new_and_retyped_entries_are_carried_deleted_ones_removed() -> None:
    before = named(
        {
            "calc.py": ("f", OLD),
            "same.py": ("f", OLD),
            "pkg": ("d", OLD),
            "pkg/a.py": ("f", OLD),
            "pkg/sub": ("d", OLD),
            "pkg/sub/b.py": ("f", OLD),
            "data": ("f", OLD),
            "link": ("l", OLD),
        }
    )
    after = named(
        {
            "calc.py": ("f", NEW),
            "same.py": ("f", OLD),
            "data": ("d", NEW),
            "data/x.bin": ("f", NEW),
            "link": ("l", NEW),
            "fifo": ("p", NEW),
            "new": ("d", NEW),
            "new/c.py": ("f", NEW),
        }
    )
    plan = plan_changes(before, after)
    assert plan.carry == app("calc.py", "data", "data/x.bin", "link", "new", "new/c.py")
    assert plan.delete == app("data", "pkg")  # top-most only; "data" changed type
    assert plan.restored == []


def test_a_change_just_before_the_start_counts_the_coarse_file_clock() -> None:
    before = listing(**{"a.py": ("f", OLD), "b.py": ("f", OLD)})
    after = listing(**{"a.py": ("f", START - 0.5), "b.py": ("f", START - 30)})
    assert plan_changes(before, after).carry == app("a.py")


def test_test_files_the_agent_touched_stay_as_the_image_has_them() -> None:
    before = named(
        {
            "calc.py": ("f", OLD),
            "tests": ("d", OLD),
            "tests/test_visible.py": ("f", OLD),
            "tests/fixtures": ("d", OLD),
            "tests/fixtures/data.json": ("f", OLD),
            "test_top.py": ("f", OLD),
            "notes.txt": ("f", OLD),
        }
    )
    after = named(
        {
            "calc.py": ("f", NEW),
            "test_top.py": ("d", NEW),  # replaced by a directory
            "test_top.py/x": ("f", NEW),
            "test_new.py": ("f", NEW),
        }
    )
    plan = plan_changes(before, after)
    assert plan.restored == app("test_top.py", "tests/fixtures/data.json", "tests/test_visible.py")
    assert plan.carry == app("calc.py", "test_new.py")
    assert plan.delete == app("notes.txt")  # not tests/ (tests live in it), not test_top.py


def test_parse_entries_skips_paths_that_leave_the_workdir() -> None:
    data = b"f 1.5 ok.py\0f 2 ../etc/passwd\0f 2 /abs\0f x bad-ctime\0d 3 a/./b\0l 4 a/link\0\0"
    assert parse_entries(data) == {"ok.py": ("f", 1.5), "a/link": ("l", 4.0)}


def _tar(*members: tuple[str, bytes, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, data.decode()
            elif kind == "chr":
                info.type = tarfile.CHRTYPE
            else:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if kind == "file" else None)
    return buffer.getvalue()


def _names(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        return [m.name.removeprefix("./") for m in archive]


def test_an_honest_archive_passes_unchanged() -> None:
    before = rooted({"pkg": ("d", OLD), "pkg/a.py": ("f", OLD)})
    data = _tar(
        ("./pkg/a.py", b"x = 1\n", "file"), ("./new/", b"", "dir"), ("./new/b", b"", "file")
    )
    checked, rejected = check_archive(data, ["new", "new/b", "pkg/a.py"], before)
    assert (checked, rejected) == (data, [])


def test_members_not_asked_for_or_placed_through_links_are_dropped() -> None:
    before = rooted({"pkg": ("d", OLD), "data": ("f", OLD)})
    data = _tar(
        ("./pkg/ok.py", b"ok\n", "file"),
        ("./evil", b"/usr/local/bin", "sym"),
        ("./evil/pytest", b"#!/bin/sh\nexit 0\n", "file"),
        ("./data/inner", b"x", "file"),
        ("./dev", b"", "chr"),
        ("../outside", b"x", "file"),
        ("./unlisted", b"x", "file"),
    )
    wanted = ["data/inner", "dev", "evil", "evil/pytest", "pkg/ok.py"]
    checked, rejected = check_archive(data, wanted, before)
    assert _names(checked) == ["pkg/ok.py", "evil"]
    assert dict(rejected) == {
        "evil/pytest": "below evil, which is not a directory",
        "data/inner": "below data, which is not a directory",
        "dev": "not a regular file, directory or symlink",
        "../outside": "not an entry that was asked for",
        "unlisted": "not an entry that was asked for",
    }
    with tarfile.open(fileobj=io.BytesIO(checked)) as archive:
        member = archive.extractfile("./pkg/ok.py")
        assert member is not None
        assert member.read() == b"ok\n"


def test_clean_mode_carries_only_the_artifacts_the_file_system_carry_leaves_out() -> None:
    sources = ("/app/out", "/srv/report", "/logs/artifacts", "/app")
    copies = [CopiedPath(source=s, destination=s) for s in sources]
    assert [c.source for c in carried_copies("clean", copies, "/app")] == ["/logs/artifacts"]
    assert len(carried_copies("separate", copies, "/app")) == 4


def test_changes_anywhere_are_carried_but_watched_and_own_paths_are_not() -> None:
    site = "usr/local/lib/python3.13/site-packages"
    old = {
        "etc": ("d", OLD),
        "etc/sudoers.d": ("d", OLD),
        "etc/issue": ("f", OLD),
        "etc/hosts": ("f", OLD),
        "usr/local/bin/pytest": ("f", OLD),
        f"{site}/_pytest/main.py": ("f", OLD),
        f"{site}/pluggy/x.py": ("f", OLD),
        "app": ("d", OLD),
        "app/conftest.py": ("f", OLD),
    }
    new = {
        "etc": ("d", NEW),
        "etc/sudoers.d": ("d", NEW),
        "etc/sudoers.d/agent": ("f", NEW),
        "etc/hosts": ("f", NEW),  # a mount point
        "root/.ssh/authorized_keys": ("f", NEW),
        "usr/local/bin/pytest": ("f", NEW),
        "usr/local/bin/tool": ("f", NEW),
        f"{site}/_pytest/main.py": ("f", NEW),
        f"{site}/evil.pth": ("f", NEW),
        f"{site}/sitecustomize.py": ("f", NEW),
        f"{site}/requests/__init__.py": ("f", NEW),
        f"{site}/requests/__pycache__/x.pyc": ("f", NEW),
        f"{site}/forge-1.0.dist-info/entry_points.txt": ("f", NEW),
        "conftest.py": ("f", NEW),
        "tmp/.envfarm-carry-1": ("f", NEW),
        "tmp/work.txt": ("f", NEW),
        "app": ("d", OLD),
        "app/conftest.py": ("f", NEW),
    }
    scope = CarryScope(
        workdir="/app",
        mounts=["/", "/etc/hosts", "/proc"],
        plugin_files={f"/{site}/forge-1.0.dist-info/entry_points.txt"},
    )
    before = Listing(workdir="/app", now=START, entries=old)
    plan = plan_changes(before, Listing(workdir="/app", now=NEW, entries=new), scope)
    assert plan.carry == [
        "app/conftest.py",
        "etc",
        "etc/sudoers.d",
        "etc/sudoers.d/agent",
        "root/.ssh/authorized_keys",
        "tmp/work.txt",
        "usr/local/bin/tool",
        f"{site}/requests/__init__.py",
    ]
    assert plan.delete == ["etc/issue"]
    assert dict(plan.withheld) == {
        "conftest.py": "pytest file above the workdir",
        f"{site}/_pytest/main.py": "installed test runner",
        f"{site}/pluggy/x.py": "installed test runner",  # deleted: restored
        f"{site}/evil.pth": "site .pth file",
        f"{site}/forge-1.0.dist-info/entry_points.txt": "pytest plugin registration",
        f"{site}/sitecustomize.py": "interpreter start-up hook",
        "usr/local/bin/pytest": "interpreter or test runner",
    }
