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

The same build makes ``gvisor-compat.so`` (``images/sandboxd/gvisor_compat.c``), cached next to
the helper. A sandbox under gVisor gets it at ``COMPAT_PATH`` and an ``/etc/ld.so.preload``
naming it, the same way as the helper (read-only bind mounts, else in the upload): it makes
``ls`` and ``stat`` work on gVisor releases whose ``statx`` rejects ``AT_NO_AUTOMOUNT``
(``runtimes.py``). Other sandboxes get neither.
"""

from __future__ import annotations

import asyncio
import functools
import io
import os
import platform
import socket
import tarfile
import tempfile
import threading
from pathlib import Path
from typing import NamedTuple

import docker.errors
import requests
from docker.models.containers import Container
from docker.types import Mount

from envfarm.errors import ImageError, SandboxStartError
from envfarm.sandbox.docker.client import docker_client, image_config
from envfarm.sandbox.docker.containers import remove_in_background
from envfarm.sandbox.docker.images.build import BuildSpec, LogFn, exclusive, run_build
from envfarm.sandbox.docker.images.hostconfig import read_host_config
from envfarm.sandbox.docker.images.recipes import ensure_base_image
from envfarm.sandbox.docker.labels import LABEL_KIND, LABEL_MANAGED, LABEL_OWNER, owner_label
from envfarm.sandbox.docker.workstation import INIT_PATH
from envfarm.sandbox.images.helper import RECIPE_FILES, helper_key, recipe_dir

HELPER_DIR = "/.envfarm"
HELPER_PATH = f"{HELPER_DIR}/sandboxd"
COMPAT_PATH = f"{HELPER_DIR}/gvisor-compat.so"
PRELOAD_PATH = "/etc/ld.so.preload"
BUILD_TIMEOUT_S = 900.0
_BUILT_DIR = "/out"
_HELPER_NAME = "sandboxd"
_COMPAT_NAME = "gvisor-compat.so"
_SUDO_NAME = "sudo"
SUDO_PATH = "/usr/bin/sudo"
WORKSTATION_COMPAT_PATH = "/usr/local/lib/libstatx-compat.so.1"
"""Where the workstation profile puts the gVisor library: a library's place, no envfarm name."""


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "envfarm"


def cached_helper_path() -> Path:
    return cache_dir() / f"sandboxd-{platform.machine()}-{helper_key()}"


class Companions(NamedTuple):
    """The files cached next to a helper binary for sandboxes under gVisor."""

    compat: Path
    preload: Path


def companions(binary: Path) -> Companions:
    return Companions(
        binary.with_name(f"gvisor-compat-{binary.name}.so"),
        binary.with_name(f"ld.so.preload-{binary.name}"),
    )


def sudo_client(binary: Path) -> Path:
    """The workstation profile's ``sudo`` (``images/sandboxd/sudo.c``), cached beside the helper."""
    return binary.with_name(f"sudo-{binary.name}")


def _cached(target: Path) -> bool:
    return (
        target.is_file()
        and sudo_client(target).is_file()
        and all(path.is_file() for path in companions(target))
    )


async def ensure_helper(*, on_log: LogFn | None = None) -> Path:
    """The helper binary on this machine (its companions next to it), built first if the
    cache has none."""
    target = cached_helper_path()
    if _cached(target):
        return target
    async with exclusive(f"sandboxd-{target.name}"):
        if _cached(target):
            return target
        base = await ensure_base_image(on_log=on_log)
        tag = f"envfarm/sandboxd-build:{helper_key()}"
        with tempfile.TemporaryDirectory(prefix="envfarm-sandboxd-") as tmp:
            context = Path(tmp)
            for name in RECIPE_FILES:
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
        built = await asyncio.to_thread(_extract_built, tag)
        compat, preload = companions(target)
        await asyncio.to_thread(_store, built[_COMPAT_NAME], compat, 0o644)
        await asyncio.to_thread(_store, f"{COMPAT_PATH}\n".encode(), preload, 0o644)
        await asyncio.to_thread(_store, built[_SUDO_NAME], sudo_client(target), 0o755)
        await asyncio.to_thread(_store, built[_HELPER_NAME], target, 0o755)
    return target


def _extract_built(tag: str) -> dict[str, bytes]:
    """The files the build left in ``_BUILT_DIR``, by name."""
    client = docker_client()
    try:
        container = client.containers.create(tag, command=["true"], entrypoint=[])
        try:
            stream, _ = container.get_archive(_BUILT_DIR)
            built: dict[str, bytes] = {}
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
                for member in archive:
                    extracted = archive.extractfile(member) if member.isfile() else None
                    if extracted is not None:
                        built[Path(member.name).name] = extracted.read()
            missing = {_HELPER_NAME, _COMPAT_NAME, _SUDO_NAME} - set(built)
            if missing:
                raise ImageError(
                    f"the helper build left no {', '.join(sorted(missing))} in {_BUILT_DIR}"
                )
            return built
        finally:
            container.remove(force=True)
            client.images.remove(tag)
    except (docker.errors.DockerException, requests.RequestException) as exc:
        raise ImageError(f"could not copy the sandbox helper out of {tag}: {exc}") from exc


def _store(content: bytes, target: Path, mode: int) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        raise ImageError(f"cannot cache the sandbox helper at {target}: {exc}") from exc


@functools.lru_cache(maxsize=8)
def helper_archive(binary: Path, gvisor: bool = False, workstation: bool = False) -> bytes:
    """A tar holding the helper (at ``INIT_PATH`` with the ``sudo`` client for the workstation
    profile) and, for gVisor, its companions in ``HELPER_DIR``, ready for ``put_archive`` at
    ``/``; its files dated as the binary is."""
    files: list[tuple[str, bytes, int]] = [(HELPER_PATH, binary.read_bytes(), 0o755)]
    if workstation:
        files = [
            (INIT_PATH, binary.read_bytes(), 0o755),
            (SUDO_PATH, sudo_client(binary).read_bytes(), 0o755),
        ]
    if gvisor:
        where = WORKSTATION_COMPAT_PATH if workstation else COMPAT_PATH
        files += [
            (where, companions(binary).compat.read_bytes(), 0o644),
            (PRELOAD_PATH, f"{where}\n".encode(), 0o644),
        ]
    mtime = binary.stat().st_mtime
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        if any(name.startswith(f"{HELPER_DIR}/") for name, _, _ in files):
            folder = tarfile.TarInfo(HELPER_DIR.lstrip("/"))
            folder.type, folder.mode, folder.mtime = tarfile.DIRTYPE, 0o755, mtime
            archive.addfile(folder)
        for name, content, mode in files:
            info = tarfile.TarInfo(name.lstrip("/"))
            info.size, info.mode, info.mtime = len(content), mode, mtime
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


class Attachment(NamedTuple):
    sock: socket.socket
    """Our own duplicate of the engine connection: the SDK's objects can go."""
    default_user: str
    """The image's ``USER``: who runs an exec that names no user (docker exec's default)."""
    set_home: bool
    """Set HOME from the exec user's passwd entry (False when the container env pins it)."""


_bind_mountable: dict[str, bool] = {}
_probing = threading.Lock()


def _probe_bind_mount(mount: Mount, image: str) -> bool | None:
    """Whether the engine accepts ``mount`` (None: ``image`` is missing). The probe is
    removed off the caller's path."""
    api = docker_client().api
    try:
        probe = api.create_container(
            image,
            command=["true"],
            entrypoint=[],
            host_config=api.create_host_config(mounts=[mount]),
            labels={LABEL_MANAGED: "true", LABEL_KIND: "probe", LABEL_OWNER: owner_label()},
        )
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError:
        return False
    remove_in_background(probe["Id"])
    return True


def helper_mounts(binary: Path, image: str, *, gvisor: bool = False) -> list[Mount]:
    """Blocking. A read-only bind mount of the cached helper at ``HELPER_PATH`` (and, for
    gVisor, of its companions) when the engine sees this machine's files, else none
    (``attach_helper`` uploads them then).

    Probed once per process by creating (not starting) a container with the mount: an engine
    on another machine, or in another mount namespace, refuses a source path it lacks.
    """
    mount = Mount(HELPER_PATH, str(binary), type="bind", read_only=True)
    with _probing:  # one probe for the episodes that start together
        if str(binary) not in _bind_mountable:
            found = _probe_bind_mount(mount, image)
            if found is None:
                return []  # the sandbox's own create will say so
            _bind_mountable[str(binary)] = found
    if not _bind_mountable[str(binary)]:
        return []
    if not gvisor:
        return [mount]
    compat, preload = companions(binary)
    return [
        mount,
        Mount(COMPAT_PATH, str(compat), type="bind", read_only=True),
        Mount(PRELOAD_PATH, str(preload), type="bind", read_only=True),
    ]


def upload_helper(
    container: Container, binary: Path, *, gvisor: bool = False, workstation: bool = False
) -> None:
    """Before start: put the helper (and for gVisor its companions) in the container."""
    if not container.put_archive("/", helper_archive(binary, gvisor, workstation)):
        raise SandboxStartError("the engine refused the upload of the sandbox helper")


def attach_helper(
    container: Container,
    binary: Path,
    *,
    upload: bool,
    gvisor: bool = False,
    workstation: bool = False,
) -> Attachment:
    """Before start: put the helper (and for gVisor its companions) in the container
    (``upload``: unless they are bind-mounted), attach to the helper's stdin and stdout, and
    learn the exec defaults."""
    default_user = str(image_config(str(container.attrs["Image"])).get("User") or "")
    env = container.attrs["Config"].get("Env") or []
    set_home = not any(item.startswith("HOME=") for item in env)
    if upload:
        upload_helper(container, binary, gvisor=gvisor, workstation=workstation)
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
    return Attachment(sock, default_user, set_home)
