"""What envfarm's images inherit from the host: package mirrors, CA certificates, proxies.

No registry or mirror is named in envfarm's code. Images reach the same apt archive and PyPI
index the host uses, through the same CA certificates, by copying a filtered subset of the
host's configuration into the base image (so every image built FROM it inherits it):

* apt: the host's sources for the Debian suite being built and its ``Acquire::`` proxy, check,
  retry and timeout settings, filtered as ``aptconfig`` explains.
* pip: ``index-url``, ``extra-index-url``, ``trusted-host`` and ``timeout`` from the host's pip
  config files and ``PIP_*`` variables. ``file://`` or path indexes, ``find-links``,
  ``constraint`` and every other key that points into the host are dropped; ``cert`` becomes
  the image's own CA bundle.
* npm: ``registry`` (and ``@scope:registry``), ``strict-ssl``, proxy, retry and timeout settings
  from the host's global and user npmrc files and ``NPM_CONFIG_*`` variables, written to the
  image's ``/etc/npmrc``; credentials (``_auth``, ``_authToken``...) and host paths are never
  copied, and ``cafile`` becomes the image's own CA bundle.
* Maven, Cargo and Go: their mirror settings, as ``toolconfig`` explains.
* the extra CA certificates of ``/usr/local/share/ca-certificates``.
* ``http(s)_proxy`` / ``no_proxy`` variables, passed to builds as build args (never stored).

The host's apt sources are those of the host's own Debian release (``SUITE``); an image of
another release (``trixie``) gets the same archives with the suite names changed
(``for_suite``), so no mirror is named here either. ``read_host_config`` does the reading (its
paths are parameters, so tests use a temporary tree); everything else is a pure function of
file texts.
"""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from envfarm.errors import ImageError
from envfarm.sandbox.docker.images.aptconfig import (
    SUITE,
    AptSource,
    read_apt_config,
    render_deb822,
)
from envfarm.sandbox.docker.images.toolconfig import (
    IMAGE_CA_BUNDLE,
    read_tool_settings,
    tool_image_files,
)

PROXY_VARIABLES = ("http_proxy", "https_proxy", "ftp_proxy", "no_proxy")
PIP_KEPT_KEYS = ("index-url", "extra-index-url", "trusted-host", "timeout")
PIP_ENV = {
    "PIP_INDEX_URL": "index-url",
    "PIP_EXTRA_INDEX_URL": "extra-index-url",
    "PIP_TRUSTED_HOST": "trusted-host",
    "PIP_TIMEOUT": "timeout",
    "PIP_DEFAULT_TIMEOUT": "timeout",
}
NPM_KEPT_KEYS = (
    "registry",
    "strict-ssl",
    "proxy",
    "https-proxy",
    "noproxy",
    "fetch-retries",
    "fetch-timeout",
)


class HostConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    apt_sources: list[AptSource] = []
    apt_settings: list[tuple[str, str]] = []
    pip: dict[str, str] = {}
    npm: dict[str, str] = {}
    maven: dict[str, list[dict[str, str]]] = {}
    cargo: dict[str, dict[str, Any]] = {}
    go: dict[str, str] = {}
    ca_certs: dict[str, str] = {}
    """Path relative to /usr/local/share/ca-certificates -> PEM text."""
    proxy_env: dict[str, str] = {}
    suite: str = SUITE
    """The Debian release ``apt_sources`` serve."""

    def for_suite(self, suite: str) -> HostConfig:
        """The same archives for another Debian release (``bookworm-security`` ->
        ``trixie-security``)."""
        if suite == self.suite:
            return self

        def renamed(name: str) -> str:
            if name == self.suite or name.startswith(self.suite + "-"):
                return suite + name[len(self.suite) :]
            return name

        sources = [
            source.model_copy(update={"suites": [renamed(s) for s in source.suites]})
            for source in self.apt_sources
        ]
        return self.model_copy(update={"apt_sources": sources, "suite": suite})

    def debian_mirror(self) -> str | None:
        """The first main-archive URI serving the suite itself, for debootstrap."""
        for source in self.apt_sources:
            if "deb" in source.types and self.suite in source.suites and source.uris:
                return source.uris[0]
        return None

    def image_files(self) -> dict[str, bytes]:
        """Absolute path in the image -> content."""
        files = {"/etc/pip.conf": render_pip_conf(self.pip).encode()}
        if self.npm:
            files["/etc/npmrc"] = render_npmrc(self.npm).encode()
        if self.apt_sources:
            text = "\n".join(render_deb822(source) for source in self.apt_sources)
            files["/etc/apt/sources.list.d/debian.sources"] = text.encode()
        if self.apt_settings:
            lines = [f'{key} "{value}";' for key, value in self.apt_settings]
            files["/etc/apt/apt.conf.d/90envfarm-host"] = ("\n".join(lines) + "\n").encode()
        files.update(tool_image_files(self.maven, self.cargo, self.go))
        for name, pem in self.ca_certs.items():
            files[f"/usr/local/share/ca-certificates/{name}"] = pem.encode()
        return files

    def digest(self) -> str:
        """Hash of what ends up in the image (proxies are build args only, so excluded)."""
        payload = json.dumps(
            {path: content.decode() for path, content in sorted(self.image_files().items())}
        )
        return hashlib.sha256(payload.encode()).hexdigest()


def parse_pip_config(text: str) -> dict[str, str]:
    """The ``[global]`` then ``[install]`` settings of one pip config file (keys normalised)."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    merged: dict[str, str] = {}
    for section in ("global", "install"):
        if parser.has_section(section):
            for key, value in parser.items(section):
                merged[_pip_key(key)] = " ".join(value.split())
    return merged


def inheritable_pip_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """Keep network index settings only; URLs an image cannot reach (file://, paths) go."""
    kept: dict[str, str] = {}
    for key in PIP_KEPT_KEYS:
        value = settings.get(key, "")
        if key.endswith("index-url"):
            value = " ".join(u for u in value.split() if u.startswith(("http://", "https://")))
        if value:
            kept[key] = value
    return kept


def render_pip_conf(settings: Mapping[str, str]) -> str:
    lines = ["[global]"]
    for key, value in settings.items():
        lines.append(f"{key} = " + "\n    ".join(value.split()))
    lines.append(f"cert = {IMAGE_CA_BUNDLE}")
    return "\n".join(lines) + "\n"


def parse_npmrc(text: str) -> dict[str, str]:
    """``key=value`` lines of an npmrc (``;`` and ``#`` comments skipped)."""
    settings: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith((";", "#")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        settings[key.strip()] = value.strip().strip("\"'")
    return settings


def inheritable_npm_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """Registries and network settings only: no credentials, host paths or ``${VAR}``s."""
    kept: dict[str, str] = {}
    for key, value in settings.items():
        wanted = key in NPM_KEPT_KEYS or re.fullmatch(r"@[\w.-]+:registry", key)
        if wanted and value and "${" not in value and not value.startswith(("/", "file:")):
            kept[key] = value
    if settings.get("cafile") and kept:
        kept["cafile"] = IMAGE_CA_BUNDLE
    return kept


def render_npmrc(settings: Mapping[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def host_npm_config_files(env: Mapping[str, str], home: Path, root: Path) -> list[Path]:
    """Global (Debian's ``/etc/npmrc``, npm's ``$PREFIX/etc/npmrc``), then the user's."""
    files = [root / "etc/npmrc", root / "usr/etc/npmrc", root / "usr/local/etc/npmrc"]
    if env.get("NPM_CONFIG_GLOBALCONFIG"):
        files.append(Path(env["NPM_CONFIG_GLOBALCONFIG"]))
    files.append(Path(env.get("NPM_CONFIG_USERCONFIG") or home / ".npmrc"))
    return files


def host_npm_settings(env: Mapping[str, str], home: Path, root: Path) -> dict[str, str]:
    settings: dict[str, str] = {}
    for path in host_npm_config_files(env, home, root):
        if path.is_file():
            settings.update(parse_npmrc(path.read_text(errors="replace")))
    for name, value in env.items():
        if name.lower().startswith("npm_config_") and value:
            settings[name[len("npm_config_") :].lower().replace("_", "-")] = value
    return inheritable_npm_settings(settings)


def host_pip_config_files(
    env: Mapping[str, str], home: Path, site_prefix: Path, root: Path = Path("/")
) -> list[Path]:
    """pip's own order: global, user, site, then ``PIP_CONFIG_FILE`` (later ones win)."""
    env_file = env.get("PIP_CONFIG_FILE")
    if env_file == os.devnull:
        return []
    xdg_dirs = env.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    config_home = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    files = [root / d.lstrip("/") / "pip" / "pip.conf" for d in xdg_dirs if d]
    files += [root / "etc/pip.conf", home / ".pip/pip.conf", config_home / "pip/pip.conf"]
    files.append(site_prefix / "pip.conf")
    if env_file:
        files.append(Path(env_file))
    return files


def read_host_config(
    root: Path = Path("/"),
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
    site_prefix: Path | None = None,
) -> HostConfig:
    """Read the host's configuration (``root`` etc. are parameters so tests can use a tree)."""
    env = os.environ if env is None else env
    sources, settings = read_apt_config(root)
    pip: dict[str, str] = {}
    for path in host_pip_config_files(
        env, home or Path.home(), site_prefix or Path(sys.prefix), root
    ):
        if path.is_file():
            try:
                pip.update(parse_pip_config(path.read_text()))
            except configparser.Error as exc:
                raise ImageError(f"{path}: not a valid pip config file: {exc}") from exc
    pip.update({key: env[var] for var, key in PIP_ENV.items() if env.get(var)})
    ca_dir = root / "usr/local/share/ca-certificates"
    certs = {
        str(path.relative_to(ca_dir)): path.read_text()
        for path in sorted(ca_dir.rglob("*.crt"))
        if path.is_file() and "BEGIN CERTIFICATE" in path.read_text(errors="replace")
    }
    proxies = {
        name: env[name]
        for variable in PROXY_VARIABLES
        for name in (variable, variable.upper())
        if env.get(name)
    }
    maven, cargo, go = read_tool_settings(root, env, home or Path.home())
    return HostConfig(
        apt_sources=sources,
        apt_settings=settings,
        pip=inheritable_pip_settings(pip),
        npm=host_npm_settings(env, home or Path.home(), root),
        maven=maven,
        cargo=cargo,
        go=go,
        ca_certs=certs,
        proxy_env=proxies,
    )


def _pip_key(key: str) -> str:
    key = key.replace("_", "-").lower()
    return "timeout" if key == "default-timeout" else key
