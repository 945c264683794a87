"""The first step of the base image: ``debootstrap`` a Debian rootfs and ``docker import`` it.

Blocking code, run in a worker thread by ``recipes.py``. The rootfs is built in a temporary
directory under /var/tmp (it needs a real filesystem with device nodes, so not a tmpfs),
stripped of host leftovers (apt lists and .debs, the host's resolv.conf and hostname), streamed
through ``tar`` straight into the engine, and removed afterwards. Before removing it, anything
debootstrap left mounted inside it is unmounted; if something stays mounted the directory is
left in place rather than risk deleting through a mount.
"""

from __future__ import annotations

import collections
import fnmatch
import json
import os
import shutil
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import docker.errors
import requests
from pydantic import BaseModel, ConfigDict, ValidationError

from envfarm.errors import ImageError
from envfarm.sandbox.docker.client import docker_client

WORK_DIR = Path("/var/tmp")
IMAGE_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["bash"]',
)
_CHUNK = 1 << 20


class RootfsRecipe(BaseModel):
    model_config = ConfigDict(extra="forbid")

    variant: str
    components: list[str]
    include: list[str]
    path_exclude: list[str] = []
    path_include: list[str] = []


def load_rootfs_recipe(path: Path) -> RootfsRecipe:
    try:
        return RootfsRecipe.model_validate(tomllib.loads(path.read_text()))
    except (OSError, tomllib.TOMLDecodeError, ValidationError) as exc:
        raise ImageError(f"{path}: invalid rootfs recipe: {exc}") from exc


def build_rootfs_image(
    recipe: RootfsRecipe,
    suite: str,
    mirror: str | None,
    tag: str,
    labels: dict[str, str],
    on_log: Callable[[str], None],
    timeout: float,
) -> str:
    """debootstrap + import; returns the image id. ``mirror=None``: debootstrap's default."""
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    debootstrap = shutil.which("debootstrap", path=search)
    if debootstrap is None:
        raise ImageError("building the base image needs debootstrap: apt-get install debootstrap")
    if os.geteuid() != 0:
        raise ImageError("building the base image runs debootstrap, which needs root")
    work = Path(tempfile.mkdtemp(prefix="envfarm-rootfs-", dir=WORK_DIR))
    target = work / "rootfs"
    try:
        command = [
            debootstrap,
            f"--variant={recipe.variant}",
            f"--components={','.join(recipe.components)}",
            f"--include={','.join(recipe.include)}",
            suite,
            str(target),
            *([mirror] if mirror else []),
        ]
        _run_logged(command, on_log, timeout, "debootstrap")
        _strip_host_leftovers(target)
        _exclude_paths(target, recipe)
        return _import(target, tag, labels)
    finally:
        _remove(work)


def _run_logged(
    command: list[str], on_log: Callable[[str], None], timeout: float, what: str
) -> None:
    tail: collections.deque[str] = collections.deque(maxlen=30)
    deadline = time.monotonic() + timeout
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line.rstrip("\n"))
            on_log(line.rstrip("\n"))
            if time.monotonic() > deadline:
                proc.kill()
                raise ImageError(f"{what} did not finish within {timeout:.0f} s")
        code = proc.wait()
    if code != 0:
        raise ImageError(f"{what} failed with exit code {code}:\n" + "\n".join(tail))


def _strip_host_leftovers(target: Path) -> None:
    for pattern in ("var/cache/apt/archives/*.deb", "var/lib/apt/lists/*"):
        for path in target.glob(pattern):
            if path.is_file():
                path.unlink()
    for name in ("etc/resolv.conf", "etc/hostname"):
        path = target / name
        if path.is_file() or path.is_symlink():
            path.unlink()
            path.write_text("")


def _exclude_paths(target: Path, recipe: RootfsRecipe) -> None:
    """Write dpkg's path-exclude rules and delete what they exclude from the rootfs."""
    rules = [f"path-exclude {p}" for p in recipe.path_exclude]
    rules += [f"path-include {p}" for p in recipe.path_include]
    (target / "etc/dpkg/dpkg.cfg.d/envfarm-slim").write_text("\n".join(rules) + "\n")
    for pattern in recipe.path_exclude:
        top = target / pattern.split("*", 1)[0].strip("/")
        for path in list(top.rglob("*")) if top.is_dir() else []:
            name = "/" + str(path.relative_to(target))
            if path.is_dir() and not path.is_symlink():
                continue
            if fnmatch.fnmatchcase(name, pattern) and not any(
                fnmatch.fnmatchcase(name, keep) for keep in recipe.path_include
            ):
                path.unlink()


def _import(target: Path, tag: str, labels: dict[str, str]) -> str:
    repository, _, version = tag.rpartition(":")
    changes = [*IMAGE_CHANGES, *(f"LABEL {key}={value}" for key, value in labels.items())]
    with subprocess.Popen(
        ["tar", "--numeric-owner", "-C", str(target), "-c", "."],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as tar:
        assert tar.stdout is not None
        assert tar.stderr is not None
        stream = tar.stdout

        def chunks() -> Iterator[bytes]:
            while data := stream.read(_CHUNK):
                yield data

        try:
            result = docker_client().api.import_image(
                src=chunks(), repository=repository, tag=version, changes=changes, stream_src=True
            )
        except (docker.errors.DockerException, requests.RequestException) as exc:
            tar.kill()
            raise ImageError(f"docker import of the base rootfs failed: {exc}") from exc
        error = tar.stderr.read().decode(errors="replace")
        if tar.wait() != 0:
            raise ImageError(f"tar of the base rootfs failed: {error}")
    last = json.loads(str(result).strip().splitlines()[-1])
    if "error" in last:
        raise ImageError(f"docker import of the base rootfs failed: {last['error']}")
    return str(docker_client().images.get(tag).id)


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()) + "/"
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts]
    return [p for p in points if p.startswith(prefix)]


def _remove(work: Path) -> None:
    for point in sorted(_mounts_under(work), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], check=False, capture_output=True)
    if _mounts_under(work):
        raise ImageError(f"{work}: still has mounts after debootstrap; remove it by hand")
    shutil.rmtree(work, ignore_errors=True)
