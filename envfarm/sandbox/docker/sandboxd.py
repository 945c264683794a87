"""The in-sandbox helper ``sandboxd``: built once per machine, cached, put into every sandbox.

The helper is one C file (``images/sandboxd/sandboxd.c``) linked statically, so it runs in any
task image, whatever libc (or none) the image has. Building it never needs a compiler on the
host: ``images/sandboxd/Dockerfile`` compiles it on the envfarm base image (apt-installing gcc
there); the binary is copied out of that image (``docker create`` + ``get_archive``), the image
is removed, and the binary is cached at ``$XDG_CACHE_HOME/envfarm/sandboxd-<arch>-<hash>``
(``~/.cache`` without XDG), keyed by the hash of the source and the recipe: editing either
builds a new one. The build holds the same cross-process lock as image builds.

Each sandbox sees it at ``HELPER_PATH`` through a read-only bind mount of the cached file:
free at start, and the sandbox cannot alter it. An engine that cannot see this machine's files
(remote, or in another mount namespace) gets it by ``put_archive`` into the created container
instead (mode 0755; 30-60 ms a start, as the engine re-executes itself to unpack). Either way
it is there before the container starts, with no network. ``attach_helper`` then attaches to
the container's stdin and stdout before ``start``; the raw socket it returns is what
``channel.Channel`` speaks on.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import io
import os
import platform
import socket
import tarfile
import tempfile
from pathlib import Path
from typing import NamedTuple

import docker.errors
import requests
from docker.models.containers import Container
from docker.types import Mount

from envfarm.errors import ImageError, SandboxStartError
from envfarm.sandbox.docker.aliases import images_dir
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.dockerbuild import BuildSpec, LogFn, exclusive, run_build
from envfarm.sandbox.docker.hostconfig import read_host_config
from envfarm.sandbox.docker.images import ensure_base_image

HELPER_DIR = "/.envfarm"
HELPER_PATH = f"{HELPER_DIR}/sandboxd"
BUILD_TIMEOUT_S = 900.0
_BUILT_PATH = "/out/sandboxd"
_RECIPE_FILES = ("sandboxd.c", "Dockerfile")


def recipe_dir() -> Path:
    return images_dir() / "sandboxd"


def helper_key() -> str:
    """Hash of the helper's source and build recipe (what the cached binary depends on)."""
    hasher = hashlib.sha256()
    for name in _RECIPE_FILES:
        try:
            content = (recipe_dir() / name).read_bytes()
        except OSError as exc:
            raise ImageError(
                f"{recipe_dir() / name}: cannot read the helper recipe: {exc}"
            ) from exc
        hasher.update(f"{name}:{len(content)}:".encode() + content)
    return hasher.hexdigest()[:16]


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "envfarm"


def cached_helper_path() -> Path:
    return cache_dir() / f"sandboxd-{platform.machine()}-{helper_key()}"


async def ensure_helper(*, on_log: LogFn | None = None) -> Path:
    """The helper binary on this machine, built first if the cache has none."""
    target = cached_helper_path()
    if target.is_file():
        return target
    async with exclusive(f"sandboxd-{target.name}"):
        if target.is_file():
            return target
        base = await ensure_base_image(on_log=on_log)
        tag = f"envfarm/sandboxd-build:{helper_key()}"
        with tempfile.TemporaryDirectory(prefix="envfarm-sandboxd-") as tmp:
            context = Path(tmp)
            for name in _RECIPE_FILES:
                (context / name).write_bytes((recipe_dir() / name).read_bytes())
            spec = BuildSpec(
                where="the sandbox helper (images/sandboxd)",
                context=context,
                dockerfile=context / "Dockerfile",
                tag=tag,
                labels={"io.envfarm.managed": "true", "io.envfarm.kind": "build"},
                buildargs={"BASE": base.tag, **read_host_config().proxy_env},
                timeout=BUILD_TIMEOUT_S,
            )
            await run_build(spec, on_log)
        binary = await asyncio.to_thread(_extract_binary, tag)
        await asyncio.to_thread(_store, binary, target)
    return target


def _extract_binary(tag: str) -> bytes:
    client = docker_client()
    try:
        container = client.containers.create(tag, command=["true"], entrypoint=[])
        try:
            stream, _ = container.get_archive(_BUILT_PATH)
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
                member = archive.next()
                extracted = archive.extractfile(member) if member else None
                if extracted is None:
                    raise ImageError(f"the helper build left no file at {_BUILT_PATH}")
                return extracted.read()
        finally:
            container.remove(force=True)
            client.images.remove(tag)
    except (docker.errors.DockerException, requests.RequestException) as exc:
        raise ImageError(f"could not copy the sandbox helper out of {tag}: {exc}") from exc


def _store(binary: bytes, target: Path) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        with os.fdopen(fd, "wb") as handle:
            handle.write(binary)
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    except OSError as exc:
        raise ImageError(f"cannot cache the sandbox helper at {target}: {exc}") from exc


@functools.lru_cache(maxsize=4)
def helper_archive(binary: Path) -> bytes:
    """A tar of ``HELPER_DIR`` holding the helper, ready for ``put_archive`` at ``/``."""
    buffer = io.BytesIO()
    content = binary.read_bytes()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        folder = tarfile.TarInfo(HELPER_DIR.lstrip("/"))
        folder.type, folder.mode = tarfile.DIRTYPE, 0o755
        archive.addfile(folder)
        info = tarfile.TarInfo(HELPER_PATH.lstrip("/"))
        info.size, info.mode = len(content), 0o755
        archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


class Attachment(NamedTuple):
    sock: socket.socket
    """Our own duplicate of the engine connection: the SDK's objects can go."""
    default_user: str
    """The image's ``USER``: who runs an exec that names no user (docker exec's default)."""
    set_home: bool
    """Set HOME from the exec user's passwd entry (False when the container env pins it)."""


_image_users: dict[str, str] = {}


_bind_mountable: dict[str, bool] = {}


def helper_mounts(binary: Path, image: str) -> list[Mount]:
    """Blocking. A read-only bind mount of the cached helper at ``HELPER_PATH`` when the engine
    sees this machine's files, else none (``attach_helper`` uploads it then).

    Probed once per process by creating (not starting) a container with the mount: an engine
    on another machine, or in another mount namespace, refuses a source path it lacks.
    """
    mount = Mount(HELPER_PATH, str(binary), type="bind", read_only=True)
    if str(binary) not in _bind_mountable:
        api = docker_client().api
        try:
            probe = api.create_container(
                image,
                command=["true"],
                entrypoint=[],
                host_config=api.create_host_config(mounts=[mount]),
                labels={"io.envfarm.managed": "true", "io.envfarm.kind": "probe"},
            )
        except docker.errors.ImageNotFound:
            return []  # the sandbox's own create will say so
        except docker.errors.APIError:
            _bind_mountable[str(binary)] = False
        else:
            api.remove_container(probe["Id"], force=True)
            _bind_mountable[str(binary)] = True
    return [mount] if _bind_mountable[str(binary)] else []


def attach_helper(container: Container, binary: Path, *, upload: bool) -> Attachment:
    """Before start: put the helper in the container (``upload``: unless it is bind-mounted),
    attach to the helper's stdin and stdout, and learn the exec defaults."""
    image = str(container.attrs["Image"])
    if image not in _image_users:
        config = docker_client().images.get(image).attrs.get("Config") or {}
        _image_users[image] = str(config.get("User") or "")
    env = container.attrs["Config"].get("Env") or []
    set_home = not any(item.startswith("HOME=") for item in env)
    if upload and not container.put_archive("/", helper_archive(binary)):
        raise SandboxStartError("the engine refused the upload of the sandbox helper")
    params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
    attached = docker_client().api.attach_socket(str(container.id), params=params)
    raw = getattr(attached, "_sock", attached)
    if not isinstance(raw, socket.socket) or raw.type != socket.SOCK_STREAM:
        attached.close()
        raise SandboxStartError(
            "the sandbox channel needs a unix or plain TCP engine connection; "
            "use DockerSandboxConfig(channel=False) with this DOCKER_HOST"
        )
    sock = socket.socket(fileno=os.dup(raw.fileno()))
    attached.close()
    raw.close()
    return Attachment(sock, _image_users[image], set_home)
