"""What envfarm's images inherit from the host: package mirrors, CA certificates, proxies.

No registry or mirror is named in envfarm's code. Images reach the same apt archive and PyPI
index the host uses, through the same CA certificates, by copying a filtered subset of the
host's configuration into the base image (so every image built FROM it inherits it):

* apt: the enabled ``*.list`` / ``*.sources`` entries of the Debian suite being built (other
  releases and third-party repositories are left out; a ``Signed-By`` keyring that only the
  host has is dropped so the image's own Debian keys verify), and the ``Acquire::`` proxy,
  check, retry and timeout settings of ``apt.conf.d`` (never hooks such as ``Post-Invoke``).
* pip: ``index-url``, ``extra-index-url``, ``trusted-host`` and ``timeout`` from the host's pip
  config files and ``PIP_*`` variables. ``file://`` or path indexes, ``find-links``,
  ``constraint`` and every other key that points into the host are dropped; ``cert`` becomes
  the image's own CA bundle.
* the extra CA certificates of ``/usr/local/share/ca-certificates``.
* ``http(s)_proxy`` / ``no_proxy`` variables, passed to builds as build args (never stored).

Everything here is a pure function of file texts except ``read_host_config``.
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

from pydantic import BaseModel, ConfigDict

from envfarm.errors import ImageError

SUITE = "bookworm"
IMAGE_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
DEBIAN_KEYRING_PREFIX = "/usr/share/keyrings/debian-archive-"
PROXY_VARIABLES = ("http_proxy", "https_proxy", "ftp_proxy", "no_proxy")
PIP_KEPT_KEYS = ("index-url", "extra-index-url", "trusted-host", "timeout")
PIP_ENV = {
    "PIP_INDEX_URL": "index-url",
    "PIP_EXTRA_INDEX_URL": "extra-index-url",
    "PIP_TRUSTED_HOST": "trusted-host",
    "PIP_TIMEOUT": "timeout",
    "PIP_DEFAULT_TIMEOUT": "timeout",
}
_APT_KEPT_WORDS = {
    "proxy",
    "check-valid-until",
    "check-date",
    "max-futuretime",
    "retries",
    "timeout",
    "forceipv4",
    "forceipv6",
    "verify-peer",
    "verify-host",
}
_APT_IGNORED_NAME = re.compile(r"(\.disabled|~|\.bak|\.save|\.orig|\.dpkg-[a-z]+|\.ucf-[a-z]+)$")
_APT_TOKEN = re.compile(
    r'"(?P<quoted>[^"]*)"|//[^\n]*|/\*.*?\*/|#[^\n]*|(?P<punct>[{};])|(?P<word>[^\s{};"]+)',
    re.DOTALL,
)


class AptSource(BaseModel):
    """One apt source entry (a deb822 stanza or a one-line ``deb`` entry)."""

    model_config = ConfigDict(extra="forbid")

    types: list[str]
    uris: list[str]
    suites: list[str]
    components: list[str] = []
    options: dict[str, str] = {}


class HostConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    apt_sources: list[AptSource] = []
    apt_settings: list[tuple[str, str]] = []
    pip: dict[str, str] = {}
    ca_certs: dict[str, str] = {}
    """Path relative to /usr/local/share/ca-certificates -> PEM text."""
    proxy_env: dict[str, str] = {}

    def debian_mirror(self) -> str | None:
        """The first main-archive URI serving ``SUITE`` itself, for debootstrap."""
        for source in self.apt_sources:
            if "deb" in source.types and SUITE in source.suites and source.uris:
                return source.uris[0]
        return None

    def image_files(self) -> dict[str, bytes]:
        """Absolute path in the image -> content."""
        files = {"/etc/pip.conf": render_pip_conf(self.pip).encode()}
        if self.apt_sources:
            text = "\n".join(render_deb822(source) for source in self.apt_sources)
            files["/etc/apt/sources.list.d/debian.sources"] = text.encode()
        if self.apt_settings:
            lines = [f'{key} "{value}";' for key, value in self.apt_settings]
            files["/etc/apt/apt.conf.d/90envfarm-host"] = ("\n".join(lines) + "\n").encode()
        for name, pem in self.ca_certs.items():
            files[f"/usr/local/share/ca-certificates/{name}"] = pem.encode()
        return files

    def digest(self) -> str:
        """Hash of what ends up in the image (proxies are build args only, so excluded)."""
        payload = json.dumps(
            {path: content.decode() for path, content in sorted(self.image_files().items())}
        )
        return hashlib.sha256(payload.encode()).hexdigest()


def parse_sources_list(text: str) -> list[AptSource]:
    """Parse one-line ``deb [opts] uri suite [component...]`` entries; ``#`` lines skipped."""
    sources = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        options: dict[str, str] = {}
        match = re.match(r"^(\S+)\s+\[([^\]]*)\]\s*(.*)$", line)
        if match:
            kind, opts, rest = match.groups()
            for opt in opts.split():
                key, _, value = opt.partition("=")
                options[_canonical_option(key)] = value.replace(",", " ")
            words = [kind, *rest.split()]
        else:
            words = line.split()
        if len(words) < 3:
            continue
        sources.append(
            AptSource(
                types=[words[0]],
                uris=[words[1]],
                suites=[words[2]],
                components=words[3:],
                options=options,
            )
        )
    return sources


def parse_deb822_sources(text: str) -> list[AptSource]:
    """Parse deb822 stanzas; ``Enabled: no`` stanzas are skipped."""
    sources = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if line.startswith("#"):
                continue
            if line[:1] in (" ", "\t") and key:
                extra = line.strip()
                fields[key] += "\n" + ("" if extra == "." else extra)
            elif ":" in line:
                key, _, value = line.partition(":")
                key = _canonical_option(key.strip())
                fields[key] = value.strip()
        if not fields or fields.pop("Enabled", "yes").lower() == "no":
            continue
        sources.append(
            AptSource(
                types=fields.pop("Types", "").split(),
                uris=fields.pop("URIs", "").split(),
                suites=fields.pop("Suites", "").split(),
                components=fields.pop("Components", "").split(),
                options=fields,
            )
        )
    return sources


def render_deb822(source: AptSource) -> str:
    fields = {
        "Types": " ".join(source.types),
        "URIs": " ".join(source.uris),
        "Suites": " ".join(source.suites),
        "Components": " ".join(source.components),
        **source.options,
    }
    lines = []
    for key, value in fields.items():
        if value:
            first, *rest = value.split("\n")
            lines.append(f"{key}: {first}".rstrip())
            lines += [" " + (part or ".") for part in rest]
    return "\n".join(lines) + "\n"


def image_apt_sources(sources: list[AptSource], root: Path = Path("/")) -> list[AptSource]:
    """The entries an image of ``SUITE`` can use: deb type, this suite, network URIs."""
    kept = []
    for source in sources:
        suites = [s for s in source.suites if s == SUITE or s.startswith(SUITE + "-")]
        uris = [u for uri in source.uris if (u := _network_uri(uri, root))]
        if "deb" not in source.types or not suites or not uris:
            continue
        options = {
            key: value
            for key, value in source.options.items()
            if not value.startswith("/") or value.startswith(DEBIAN_KEYRING_PREFIX)
        }
        kept.append(
            source.model_copy(
                update={"types": ["deb"], "uris": uris, "suites": suites, "options": options}
            )
        )
    return kept


def parse_apt_conf(text: str) -> list[tuple[str, str]]:
    """Flatten apt.conf syntax into (``A::B::C``, value) pairs; list items keep their scope."""
    scope: list[str] = []
    pending: list[tuple[str, bool]] = []
    settings: list[tuple[str, str]] = []
    for match in _APT_TOKEN.finditer(text):
        punct, word, quoted = match.group("punct"), match.group("word"), match.group("quoted")
        if punct == "{":
            scope.append(pending[0][0] if pending else "")
            pending = []
        elif punct in ("}", ";"):
            if len(pending) >= 2:
                settings.append(("::".join([*scope, pending[0][0]]), pending[1][0]))
            elif len(pending) == 1 and pending[0][1] and scope:
                settings.append(("::".join(scope), pending[0][0]))
            if punct == "}" and scope:
                scope.pop()
            pending = []
        elif word is not None or quoted is not None:
            pending.append((word, False) if word is not None else (quoted or "", True))
    return settings


def inheritable_apt_settings(settings: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Only ``Acquire::`` proxy/check/retry/timeout settings whose value is not a host path."""
    kept = []
    for key, value in settings:
        words = key.lower().split("::")
        if words[0] == "acquire" and _APT_KEPT_WORDS.intersection(words[1:]):
            if not value.startswith("/"):
                kept.append((key, value))
    return kept


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
    sources: list[AptSource] = []
    apt_dir = root / "etc/apt"
    if (apt_dir / "sources.list").is_file():
        sources += parse_sources_list((apt_dir / "sources.list").read_text())
    for path in sorted(apt_dir.glob("sources.list.d/*")):
        if path.suffix == ".list":
            sources += parse_sources_list(path.read_text())
        elif path.suffix == ".sources":
            sources += parse_deb822_sources(path.read_text())
    settings: list[tuple[str, str]] = []
    for path in sorted(apt_dir.glob("apt.conf.d/*")):
        if path.is_file() and re.fullmatch(r"[\w.-]+", path.name):
            if not _APT_IGNORED_NAME.search(path.name):
                settings += parse_apt_conf(path.read_text(errors="replace"))
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
    return HostConfig(
        apt_sources=image_apt_sources(sources, root),
        apt_settings=inheritable_apt_settings(settings),
        pip=inheritable_pip_settings(pip),
        ca_certs=certs,
        proxy_env=proxies,
    )


def _network_uri(uri: str, root: Path) -> str | None:
    """An http(s) URI as is; ``mirror+file:`` resolved to its first http(s) line; else None."""
    if uri.startswith(("http://", "https://")):
        return uri
    if uri.startswith("mirror+file:"):
        path = root / re.sub(r"^mirror\+file:(//)?", "", uri).lstrip("/")
        if path.is_file():
            for line in path.read_text().splitlines():
                if line.strip().startswith(("http://", "https://")):
                    return line.split()[0]
    return None


def _canonical_option(key: str) -> str:
    known = {"uris": "URIs", "signed-by": "Signed-By", "arch": "Architectures"}
    return known.get(key.lower(), "-".join(part.capitalize() for part in key.split("-")))


def _pip_key(key: str) -> str:
    key = key.replace("_", "-").lower()
    return "timeout" if key == "default-timeout" else key
