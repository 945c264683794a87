"""Directory transfer as free functions over the ``Sandbox`` primitives (every backend gets it)."""

from __future__ import annotations

import io
import itertools
import shlex
import tarfile
import uuid
from pathlib import Path

from envfarm.errors import SandboxError
from envfarm.sandbox.base import Sandbox

_IGNORED = {"__pycache__", ".git", ".pytest_cache"}


def add_as_root(
    archive: tarfile.TarFile, path: Path, arcname: str, *, read_only: bool = False
) -> None:
    """Add one file, directory or symlink to ``archive``, owned by root in the sandbox."""
    info = archive.gettarinfo(str(path), arcname=arcname)
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    if read_only:
        info.mode &= ~0o222
    if info.isfile():
        with path.open("rb") as handle:
            archive.addfile(info, handle)
    elif info.isdir() or info.issym():
        archive.addfile(info)


def tar_directory(src: Path, identity: str | None = None) -> bytes:
    """``src`` as a tar archive. Archives are kept per directory and reused while no entry's
    name, size, mode or modification time changed: a job uploads the same tests directory to
    each of its thousands of episodes, and building the archive is most of that upload's cost.
    ``identity`` (a task's content hash, which covers these files): an archive built under the
    same identity is reused without listing the directory again (file system calls on the
    event loop are what stalls it at thousands of episodes)."""
    if identity is not None:
        known = _ARCHIVES.get(src)
        if known is not None and known[2] == identity:
            return known[1]
    paths = [
        path
        for path in sorted(src.rglob("*"))
        if not _IGNORED.intersection(path.relative_to(src).parts)
    ]
    signature = tuple(_entry(path) for path in paths)
    cached = _ARCHIVES.get(src)
    if cached is not None and cached[0] == signature:
        _ARCHIVES[src] = (signature, cached[1], identity)
        return cached[1]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path in paths:
            add_as_root(archive, path, str(path.relative_to(src)))
    data = buffer.getvalue()
    if len(data) > ARCHIVE_KEPT_MAX_BYTES:
        return data
    if len(_ARCHIVES) >= ARCHIVES_KEPT:
        _ARCHIVES.pop(next(iter(_ARCHIVES)))
    _ARCHIVES[src] = (signature, data, identity)
    return data


ARCHIVES_KEPT = 256
ARCHIVE_KEPT_MAX_BYTES = 8 * 1024 * 1024
_ARCHIVES: dict[Path, tuple[tuple[tuple[str, int, int, int], ...], bytes, str | None]] = {}
_UPLOAD_PREFIX = uuid.uuid4().hex[:16]
"""Staging names are this process's random prefix and a counter: unique as a uuid4 per upload
would be, without a system call per upload on the event loop."""
_UPLOADS = itertools.count()


def _entry(path: Path) -> tuple[str, int, int, int]:
    stat = path.lstat()
    return (str(path), stat.st_size, stat.st_mode, stat.st_mtime_ns)


async def upload_dir(
    sandbox: Sandbox,
    src: Path,
    dest: str,
    *,
    replace: bool = True,
    first: str = "",
    identity: str | None = None,
) -> None:
    """Copy the local directory ``src`` to ``dest`` in the sandbox (replacing what was there);
    ``first``: a shell command run before, in the same exec (its exit status is ignored);
    ``identity``: what names the directory's contents (``tar_directory``).

    The archive is staged inside ``dest`` itself, so an upload needs room only where it lands
    (a tmpfs mounted there has it when the agent filled the disk); ``dest`` may be a mount
    point, which is emptied rather than removed."""
    target = shlex.quote(dest)
    clear = (
        f"rm -rf {target} 2>/dev/null; mkdir -p {target} && "
        f'[ -z "$(find {target} -mindepth 1 2>/dev/null | head -n 1)" ]'
        if replace
        else f"mkdir -p {target}"
    )
    if first:
        clear = f"{{ {first}; }}; {clear}"
    prepared = await sandbox.exec(clear, timeout=300, user="root")
    if prepared.exit_code != 0:
        raise SandboxError(f"could not prepare {dest} for {src}: {prepared.stderr.strip()}")
    staging = f"{dest.rstrip('/')}/.envfarm-upload-{_UPLOAD_PREFIX}{next(_UPLOADS):x}.tar"
    await sandbox.write_file(staging, tar_directory(src, identity), mode=0o600)
    result = await sandbox.exec(
        f"tar -xf {shlex.quote(staging)} -C {target} --no-same-owner"
        f"; status=$?; rm -f {shlex.quote(staging)}; exit $status",
        timeout=300,
        user="root",
    )
    if result.exit_code != 0:
        raise SandboxError(f"could not unpack {src} into {dest}: {result.stderr.strip()}")
