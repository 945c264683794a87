"""Directory archives are reused while the directory is unchanged, and rebuilt when it changes."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from envfarm.sandbox.files import tar_directory


def contents(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_an_archive_is_reused_until_a_file_changes(tmp_path: Path) -> None:
    (tmp_path / "test.sh").write_text("exit 0\n")
    first = tar_directory(tmp_path)
    assert tar_directory(tmp_path) is first
    (tmp_path / "test.sh").write_text("exit 1\n")  # same size: the modification time tells
    stat = (tmp_path / "test.sh").stat()
    os.utime(tmp_path / "test.sh", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert contents(tar_directory(tmp_path)) == {"test.sh": b"exit 1\n"}
    (tmp_path / "data.txt").write_text("x")
    assert set(contents(tar_directory(tmp_path))) == {"test.sh", "data.txt"}
