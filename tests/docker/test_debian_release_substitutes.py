"""Substitutes keep what Dockerfiles written for the named image rely on: the Debian release a
`rust:*` tag names (with a Rust at least as new), and Ubuntu's layout on the `ubuntu:*`
stand-ins (apt sources in `ubuntu.sources`, the `ubuntu` user, `file`)."""

from __future__ import annotations

import pytest

from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.images.task_images import ensure_recipe_image
from envfarm.sandbox.images.aliases import match_alias

pytestmark = pytest.mark.asyncio(loop_scope="session")


def _run(image: str, command: str) -> str:
    output = docker_client().containers.run(
        image, ["bash", "-c", command], remove=True, entrypoint=[]
    )
    return bytes(output).decode()


async def test_an_old_rust_tag_gets_debian_12_and_a_rust_at_least_as_new() -> None:
    match = match_alias("rust:1.85-slim")
    assert match is not None
    tag = (await ensure_recipe_image(match.recipe)).tag
    out = _run(tag, "cut -d. -f1 /etc/debian_version; rustc --version; echo $CARGO_HOME; "
               "cd /tmp && cargo new -q hello && cd hello && cargo run -q")  # fmt: skip
    release, rustc, cargo_home, hello = out.splitlines()
    assert release == "12"
    minor = int(rustc.split()[1].split(".")[1])
    assert minor >= 85
    assert cargo_home == "/usr/local/cargo"
    assert hello == "Hello, world!"


async def test_the_ubuntu_stand_in_has_ubuntus_layout() -> None:
    match = match_alias("ubuntu:24.04")
    assert match is not None
    tag = (await ensure_recipe_image(match.recipe)).tag
    # a Dockerfile that points ubuntu.sources at another mirror edits the file; it must exist
    # and apt must still read it
    out = _run(tag, "ls /etc/apt/sources.list.d; sed -i 's/^Types: deb$/Types: deb/' "
               "/etc/apt/sources.list.d/ubuntu.sources && apt-get update -qq && echo updated; "
               "id -u ubuntu; file -b /bin/true | cut -d, -f1")  # fmt: skip
    assert out.splitlines() == [
        "ubuntu.sources",
        "updated",
        "1000",
        "ELF 64-bit LSB pie executable",
    ]
