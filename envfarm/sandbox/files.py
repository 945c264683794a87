"""Directory transfer as free functions over the ``Sandbox`` primitives (every backend gets it)."""

from __future__ import annotations

import io
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


def tar_directory(src: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path in sorted(src.rglob("*")):
            if _IGNORED.intersection(path.relative_to(src).parts):
                continue
            add_as_root(archive, path, str(path.relative_to(src)))
    return buffer.getvalue()


async def upload_dir(
    sandbox: Sandbox, src: Path, dest: str, *, replace: bool = True, first: str = ""
) -> None:
    """Copy the local directory ``src`` to ``dest`` in the sandbox (replacing what was there);
    ``first``: a shell command run before, in the same exec (its exit status is ignored)."""
    staging = f"/tmp/.envfarm-upload-{uuid.uuid4().hex}.tar"
    await sandbox.write_file(staging, tar_directory(src), mode=0o600)
    target = shlex.quote(dest)
    clear = f"rm -rf {target} && " if replace else ""
    if first:
        clear = f"{{ {first}; }}; {clear}"
    result = await sandbox.exec(
        f"{clear}mkdir -p {target} && tar -xf {staging} -C {target} --no-same-owner"
        f"; status=$?; rm -f {staging}; exit $status",
        timeout=300,
        user="root",
    )
    if result.exit_code != 0:
        raise SandboxError(f"could not unpack {src} into {dest}: {result.stderr.strip()}")
