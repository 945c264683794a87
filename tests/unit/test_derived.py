"""Deriving the second snapshot's workspace from the clean room's capture: what it keeps, what
it hashes, and when it gives up."""

from __future__ import annotations

import hashlib
import io
import tarfile

from envfarm.grading.cleanroom.carry import Changes, Listing
from envfarm.grading.cleanroom.derived import derivable, derive_workspace
from envfarm.grading.tamper.snapshot import Snapshot

OLD = 100.0
NOW = 200.0


def _tar(files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(content), 150
            archive.addfile(info, io.BytesIO(content))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            archive.addfile(info)
    return buffer.getvalue()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _case(
    after: dict[str, tuple[str, float]], archive: bytes | None, mounts: list[str] | None = None
) -> tuple[Snapshot, Snapshot, Listing, Changes]:
    dirs = {"app": ("d", OLD), "app/src": ("d", OLD)}
    before = Snapshot(
        workdir="/app",
        now=NOW,
        sections={"workspace": {"/app/src/kept.py": "k" * 64, "/app/gone.py": "g" * 64}},
    )
    partial = Snapshot(workdir="/app", now=NOW + 5, workspace_derived=True)
    listing = Listing("/app", NOW, dict(dirs), mounts or [])
    changed = Listing("/app", NOW + 5, dirs | after, mounts or [])
    return before, partial, listing, Changes(changed, archive)


def test_unchanged_entries_keep_their_digest_and_changed_ones_are_hashed() -> None:
    after = {
        "app/src/kept.py": ("f", OLD),
        "app/new.py": ("f", NOW + 3),
        "app/link": ("l", NOW + 3),
        "app/.git/HEAD": ("f", NOW + 3),
        "etc/other": ("f", NOW + 3),
    }
    archive = _tar({"app/new.py": b"new\n", "etc/other": b"x"}, {"app/link": "new.py"})
    derived = derive_workspace(*_case(after, archive))
    assert derived is not None
    assert derived.snapshot.section("workspace") == {
        "/app/src/kept.py": "k" * 64,
        "/app/new.py": _sha(b"new\n"),
        "/app/link": "L:" + _sha(b"new.py\n"),
    }
    assert not derived.snapshot.workspace_derived
    changed = derived.changed_tar(["new.py"])
    with tarfile.open(fileobj=io.BytesIO(changed or b"")) as tar:
        assert tar.getnames() == ["./new.py"]


def test_a_touched_entry_missing_from_the_archive_gives_up() -> None:
    after = {"app/src/kept.py": ("f", NOW + 3)}
    assert derive_workspace(*_case(after, _tar({}))) is None


def test_an_unchanged_entry_the_first_snapshot_lacks_gives_up() -> None:
    after = {"app/src/kept.py": ("f", OLD), "app/unknown.py": ("f", OLD)}
    assert derive_workspace(*_case(after, None)) is None


def test_a_workdir_that_is_no_directory_after_the_agent_gives_up() -> None:
    before, partial, listing, changes = _case({}, None)
    changes.listing.entries["app"] = ("l", NOW + 3)
    assert derive_workspace(before, partial, listing, changes) is None


def test_a_mount_at_or_below_the_workdir_is_not_derivable() -> None:
    before, _, listing, _ = _case({}, None)
    assert derivable(before, listing)
    for mount in ("/app", "/app/data", "/"):
        mounted = Listing("/app", NOW, {}, [mount, "/proc"])
        assert derivable(before, mounted) == (mount == "/"), mount
    truncated = before.model_copy(update={"workspace_truncated": True})
    assert not derivable(truncated, listing)


def test_a_name_the_snapshot_would_spell_otherwise_gives_up() -> None:
    for name in ("app/a\nb.py", "app/a\\b.py", "app/\udcff.py"):
        before, partial, listing, changes = _case({name: ("f", OLD)}, None)
        before.sections["workspace"]["/" + name] = "n" * 64
        changes.listing.entries["app/src/kept.py"] = ("f", OLD)
        assert derive_workspace(before, partial, listing, changes) is None, repr(name)
    before, partial, listing, changes = _case({"app/plain.py": ("f", OLD)}, None)
    before.sections["workspace"]["/app/plain.py"] = "n" * 64
    changes.listing.entries["app/src/kept.py"] = ("f", OLD)
    assert derive_workspace(before, partial, listing, changes) is not None
