"""Maven, Cargo and Go settings that images inherit from the host, as pip's and npm's are.

A host that reaches Maven Central, crates.io or the Go module proxy through a mirror says so
in its own configuration; builds in envfarm's images reach the same mirrors only if that
configuration comes along. As for pip and npm (``hostconfig``), only what names where packages
come from is kept; credentials and paths into the host never are:

* Maven: ``<mirrors>`` (``id``, ``name``, ``mirrorOf``, ``url``) and ``<proxies>`` (without
  ``username`` and ``password``) of the global ``settings.xml`` (``/etc/maven``, ``$M2_HOME``
  or ``$MAVEN_HOME``'s ``conf``) then the user's (``~/.m2``), but for the mirrors every Maven
  ships (the HTTP blocker). Written as the ``~/.m2`` of root and of ``/etc/skel``, so a user an
  image adds later gets them too (Debian's maven package owns ``/etc/maven/settings.xml`` as a
  conffile, which a file placed first would turn into a prompt).
* Cargo: ``[source.*]`` tables that replace a registry by another registry (``directory`` and
  ``local-registry`` sources point into the host and are dropped, with anything replaced by
  them), ``[registries.*].index`` (never a token), and ``[net]``/``[http]`` retry, proxy and
  timeout keys; ``http.cainfo`` becomes the image's CA bundle. Read from ``$CARGO_HOME``
  (``~/.cargo``) ``config.toml`` or ``config``; written to ``/.cargo/config.toml``, which cargo
  reads for every project below ``/`` whatever ``CARGO_HOME`` an image sets.
* Go: ``GOPROXY``, ``GOSUMDB``, ``GONOSUMDB``, ``GONOPROXY``, ``GOPRIVATE`` and ``GOINSECURE``
  set in the environment or in the ``go env -w`` file (``$GOENV``, else
  ``$XDG_CONFIG_HOME/go/env``), never Go's own defaults; written as the ``go env`` file of root
  and of ``/etc/skel``.
"""

from __future__ import annotations

import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from envfarm.errors import ImageError

IMAGE_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
MAVEN_MIRROR_KEYS = ("id", "name", "mirrorOf", "url")
MAVEN_PROXY_KEYS = ("id", "active", "protocol", "host", "port", "nonProxyHosts")
CARGO_SOURCE_KEYS = ("replace-with", "registry")
CARGO_NET_KEYS = ("retry", "git-fetch-with-cli", "offline")
CARGO_HTTP_KEYS = ("proxy", "timeout", "low-speed-limit", "multiplexing", "check-revoke")
GO_VARIABLES = ("GOPROXY", "GOSUMDB", "GONOSUMDB", "GONOPROXY", "GOPRIVATE", "GOINSECURE")
HOMES = ("/root", "/etc/skel")
MAVEN_SHIPPED_MIRRORS = ("maven-default-http-blocker",)
"""Mirrors every Maven 3.8+ ships in its own global settings: the image's Maven has them."""


def maven_settings(texts: list[tuple[Path, str]]) -> dict[str, list[dict[str, str]]]:
    """Mirrors and proxies of settings files, later files winning by ``id``."""
    kept: dict[str, dict[str, dict[str, str]]] = {"mirrors": {}, "proxies": {}}
    for path, text in texts:
        try:
            root = ET.fromstring(text)
        except ET.ParseError as exc:
            raise ImageError(f"{path}: not a valid Maven settings file: {exc}") from exc
        for group, item, keys in (
            ("mirrors", "mirror", MAVEN_MIRROR_KEYS),
            ("proxies", "proxy", MAVEN_PROXY_KEYS),
        ):
            for element in root.iterfind(f"{{*}}{group}/{{*}}{item}"):
                values = {key: _text(element, key) for key in keys}
                entry = {key: value for key, value in values.items() if value}
                if entry.get("id") in MAVEN_SHIPPED_MIRRORS:
                    continue
                if entry.get("url" if group == "mirrors" else "host"):
                    kept[group][entry.get("id", str(len(kept[group])))] = entry
    return {group: list(entries.values()) for group, entries in kept.items() if entries}


def render_maven_settings(settings: Mapping[str, list[dict[str, str]]]) -> str:
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', "<settings>"]
    for group, item in (("mirrors", "mirror"), ("proxies", "proxy")):
        if settings.get(group):
            lines.append(f"  <{group}>")
            for entry in settings[group]:
                fields = "".join(f"<{k}>{escape(v)}</{k}>" for k, v in entry.items())
                lines.append(f"    <{item}>{fields}</{item}>")
            lines.append(f"  </{group}>")
    return "\n".join([*lines, "</settings>"]) + "\n"


def cargo_settings(texts: list[tuple[Path, str]]) -> dict[str, dict[str, Any]]:
    """The inheritable tables of Cargo config files (later files win, key by key)."""
    merged: dict[str, dict[str, Any]] = {}
    local: set[str] = set()
    for path, text in texts:
        try:
            config = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ImageError(f"{path}: not a valid Cargo config file: {exc}") from exc
        for name, source in _table(config.get("source")).items():
            if "directory" in _table(source) or "local-registry" in _table(source):
                local.add(name)
            elif kept := _scalars(source, CARGO_SOURCE_KEYS):
                merged.setdefault(f"source.{_key(name)}", {}).update(kept)
        for name, registry in _table(config.get("registries")).items():
            if isinstance(registry, dict) and isinstance(registry.get("index"), str):
                merged.setdefault(f"registries.{_key(name)}", {})["index"] = registry["index"]
        merged.setdefault("net", {}).update(_scalars(config.get("net"), CARGO_NET_KEYS))
        http = _table(config.get("http"))
        merged.setdefault("http", {}).update(_scalars(http, CARGO_HTTP_KEYS))
        if "cainfo" in http:
            merged["http"]["cainfo"] = IMAGE_CA_BUNDLE
    return {
        name: table
        for name, table in merged.items()
        if table and table.get("replace-with") not in local
    }


def render_cargo_config(settings: Mapping[str, Mapping[str, Any]]) -> str:
    blocks = []
    for name, table in settings.items():
        body = "".join(f"{key} = {_toml_value(value)}\n" for key, value in table.items())
        blocks.append(f"[{name}]\n{body}")
    return "\n".join(blocks)


def go_settings(env: Mapping[str, str], env_file_text: str | None) -> dict[str, str]:
    """Go's mirror variables from its ``go env -w`` file, then the environment (which wins)."""
    settings: dict[str, str] = {}
    for line in (env_file_text or "").splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key in GO_VARIABLES and value:
            settings[key] = value
    settings.update({key: env[key] for key in GO_VARIABLES if env.get(key)})
    return settings


def tool_image_files(
    maven: Mapping[str, list[dict[str, str]]],
    cargo: Mapping[str, Mapping[str, Any]],
    go: Mapping[str, str],
) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for home in HOMES:
        if maven:
            files[f"{home}/.m2/settings.xml"] = render_maven_settings(maven).encode()
        if go:
            text = "".join(f"{key}={value}\n" for key, value in sorted(go.items()))
            files[f"{home}/.config/go/env"] = text.encode()
    if cargo:
        files["/.cargo/config.toml"] = render_cargo_config(cargo).encode()
    return files


def read_tool_settings(
    root: Path, env: Mapping[str, str], home: Path
) -> tuple[dict[str, list[dict[str, str]]], dict[str, dict[str, Any]], dict[str, str]]:
    """The host's Maven, Cargo and Go settings (paths are parameters, for tests)."""
    maven_files = [root / "etc/maven/settings.xml"]
    maven_files += [
        Path(env[name]) / "conf/settings.xml" for name in ("M2_HOME", "MAVEN_HOME") if env.get(name)
    ]
    maven_files.append(home / ".m2/settings.xml")
    cargo_home = Path(env.get("CARGO_HOME") or home / ".cargo")
    cargo_files = [cargo_home / "config", cargo_home / "config.toml"]
    config_home = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    go_env = Path(env.get("GOENV") or config_home / "go/env")
    go_text = go_env.read_text(errors="replace") if go_env.is_file() else None
    return (
        maven_settings(_read(maven_files)),
        cargo_settings(_read(cargo_files)),
        go_settings(env, go_text),
    )


def _read(paths: list[Path]) -> list[tuple[Path, str]]:
    seen: set[Path] = set()
    texts = []
    for path in paths:
        if path.is_file() and path.resolve() not in seen:
            seen.add(path.resolve())
            texts.append((path, path.read_text(errors="replace")))
    return texts


def _text(element: ET.Element, key: str) -> str:
    child = element.find(f"{{*}}{key}")
    return (child.text or "").strip() if child is not None else ""


def _table(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _scalars(table: object, keys: tuple[str, ...]) -> dict[str, Any]:
    items = _table(table)
    return {k: items[k] for k in keys if isinstance(items.get(k), (str, int, bool))}


def _key(name: str) -> str:
    bare = name.replace("-", "").replace("_", "").isalnum()
    return name if bare else '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
