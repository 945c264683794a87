"""Maven, Cargo and Go mirror settings images inherit from the host (temp file trees)."""

from __future__ import annotations

import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from envfarm.errors import ImageError
from envfarm.sandbox.docker.images.hostconfig import read_host_config

NS = "http://maven.apache.org/SETTINGS/1.2.0"
GLOBAL_SETTINGS = f"""<?xml version="1.0"?>
<settings xmlns="{NS}">
  <mirrors>
    <mirror>
      <id>maven-default-http-blocker</id>
      <mirrorOf>external:http:*</mirrorOf>
      <url>http://0.0.0.0/</url>
    </mirror>
    <mirror><id>corp</id><mirrorOf>*</mirrorOf><url>https://old.example.test/m2</url></mirror>
  </mirrors>
</settings>
"""
USER_SETTINGS = f"""<settings xmlns="{NS}">
  <servers><server><id>corp</id><username>me</username><password>s3cret</password></server></servers>
  <mirrors>
    <mirror><id>corp</id><name>A &amp; B</name><mirrorOf>central</mirrorOf>
      <url>https://maven.example.test/central</url></mirror>
  </mirrors>
  <proxies>
    <proxy><id>p</id><active>true</active><protocol>https</protocol><host>proxy.example.test</host>
      <port>3128</port><username>me</username><password>s3cret</password></proxy>
  </proxies>
</settings>
"""
CARGO_CONFIG = """
[source.crates-io]
replace-with = "corp-mirror"

[source.corp-mirror]
registry = "sparse+https://crates.example.test/index/"

[source.vendored]
directory = "/home/me/vendor"

[source.my-git]
replace-with = "vendored"

[registries.internal]
index = "sparse+https://internal.example.test/index/"
token = "s3cret"

[net]
retry = 5
git-fetch-with-cli = true

[http]
proxy = "proxy.example.test:3128"
cainfo = "/home/me/corp-ca.pem"
debug = true

[build]
target-dir = "/home/me/target"
"""


def host_tree(tmp_path: Path) -> tuple[Path, Path]:
    root, home = tmp_path / "root", tmp_path / "home"
    (root / "etc/maven").mkdir(parents=True)
    (root / "etc/maven/settings.xml").write_text(GLOBAL_SETTINGS)
    (home / ".m2").mkdir(parents=True)
    (home / ".m2/settings.xml").write_text(USER_SETTINGS)
    (home / ".cargo").mkdir()
    (home / ".cargo/config.toml").write_text(CARGO_CONFIG)
    (home / ".config/go").mkdir(parents=True)
    (home / ".config/go/env").write_text("GOPROXY=https://old.example.test\nGOFLAGS=-mod=mod\n")
    return root, home


def test_maven_mirrors_and_proxies_without_credentials(tmp_path: Path) -> None:
    root, home = host_tree(tmp_path)
    files = read_host_config(root=root, env={}, home=home, site_prefix=tmp_path).image_files()
    text = files["/root/.m2/settings.xml"].decode()
    assert files["/etc/skel/.m2/settings.xml"].decode() == text
    settings = ET.fromstring(text)
    mirrors = [{child.tag: child.text for child in mirror} for mirror in settings.iter("mirror")]
    assert mirrors == [
        {
            "id": "corp",
            "name": "A & B",
            "mirrorOf": "central",
            "url": "https://maven.example.test/central",
        }
    ]
    proxy = {child.tag: child.text for child in next(settings.iter("proxy"))}
    assert (proxy["host"], proxy["port"]) == ("proxy.example.test", "3128")
    assert "s3cret" not in text
    assert "username" not in text
    assert "<servers>" not in text


def test_cargo_keeps_registry_mirrors_and_drops_what_points_into_the_host(
    tmp_path: Path,
) -> None:
    root, home = host_tree(tmp_path)
    files = read_host_config(root=root, env={}, home=home, site_prefix=tmp_path).image_files()
    config = tomllib.loads(files["/.cargo/config.toml"].decode())
    assert config["source"] == {
        "crates-io": {"replace-with": "corp-mirror"},
        "corp-mirror": {"registry": "sparse+https://crates.example.test/index/"},
    }
    assert config["registries"] == {
        "internal": {"index": "sparse+https://internal.example.test/index/"}
    }
    assert config["net"] == {"retry": 5, "git-fetch-with-cli": True}
    assert config["http"] == {
        "proxy": "proxy.example.test:3128",
        "cainfo": "/etc/ssl/certs/ca-certificates.crt",
    }
    assert "build" not in config


def test_go_variables_from_the_env_file_and_the_environment(tmp_path: Path) -> None:
    root, home = host_tree(tmp_path)
    env = {"GOPROXY": "https://goproxy.example.test", "GONOSUMDB": "corp.example.test/*"}
    files = read_host_config(root=root, env=env, home=home, site_prefix=tmp_path).image_files()
    assert files["/root/.config/go/env"] == (
        b"GONOSUMDB=corp.example.test/*\nGOPROXY=https://goproxy.example.test\n"
    )


def test_nothing_configured_adds_nothing(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    bare = read_host_config(root=tmp_path, env={}, home=tmp_path / "home", site_prefix=tmp_path)
    (tmp_path / "etc/maven").mkdir(parents=True)
    blocker_only = GLOBAL_SETTINGS.split("<mirror><id>corp")[0] + "</mirrors></settings>"
    (tmp_path / "etc/maven/settings.xml").write_text(blocker_only)
    shipped = read_host_config(root=tmp_path, env={}, home=tmp_path / "home", site_prefix=tmp_path)
    assert shipped.digest() == bare.digest()
    assert not any(".m2" in path or "cargo" in path for path in shipped.image_files())


def test_a_broken_settings_file_is_named(tmp_path: Path) -> None:
    root, home = host_tree(tmp_path)
    (home / ".cargo/config.toml").write_text("[source\n")
    with pytest.raises(ImageError, match=r"\.cargo/config\.toml: not a valid Cargo config"):
        read_host_config(root=root, env={}, home=home, site_prefix=tmp_path)
    (home / ".cargo/config.toml").write_text("")
    (home / ".m2/settings.xml").write_text("<settings>")
    with pytest.raises(ImageError, match=r"settings\.xml: not a valid Maven settings file"):
        read_host_config(root=root, env={}, home=home, site_prefix=tmp_path)
