"""apt configuration: parse the host's sources and apt.conf, keep what an image can use.

Sources: one-line ``*.list`` entries and deb822 ``*.sources`` stanzas are read into one model;
an image keeps the ``deb`` entries of its own suite (``bookworm``, ``bookworm-updates``,
``bookworm-security``...) with network URIs (a ``mirror+file:`` list is resolved to its first
URL), and drops a ``Signed-By`` keyring path only the host has (the image's Debian keys verify
the Debian archive). apt.conf: the syntax is flattened to ``A::B::C`` keys; only ``Acquire::``
proxy, check, retry and timeout settings whose value is not a host path are inherited, never
hooks such as ``DPkg::Post-Invoke``.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict

SUITE = "bookworm"
DEBIAN_KEYRING_PREFIX = "/usr/share/keyrings/debian-archive-"
_KEPT_WORDS = {
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
_IGNORED_NAME = re.compile(r"(\.disabled|~|\.bak|\.save|\.orig|\.dpkg-[a-z]+|\.ucf-[a-z]+)$")
_TOKEN = re.compile(
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
    for match in _TOKEN.finditer(text):
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
        inherited = words[0] == "acquire" and _KEPT_WORDS.intersection(words[1:])
        if inherited and not value.startswith("/"):
            kept.append((key, value))
    return kept


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


def read_apt_config(root: Path = Path("/")) -> tuple[list[AptSource], list[tuple[str, str]]]:
    """The host's sources and settings (under ``root``) that an image of ``SUITE`` can use."""
    apt_dir = root / "etc/apt"
    sources: list[AptSource] = []
    if (apt_dir / "sources.list").is_file():
        sources += parse_sources_list((apt_dir / "sources.list").read_text())
    for path in sorted(apt_dir.glob("sources.list.d/*")):
        if path.suffix == ".list":
            sources += parse_sources_list(path.read_text())
        elif path.suffix == ".sources":
            sources += parse_deb822_sources(path.read_text())
    settings: list[tuple[str, str]] = []
    for path in sorted(apt_dir.glob("apt.conf.d/*")):
        name = path.name
        if path.is_file() and re.fullmatch(r"[\w.-]+", name) and not _IGNORED_NAME.search(name):
            settings += parse_apt_conf(path.read_text(errors="replace"))
    return image_apt_sources(sources, root), inheritable_apt_settings(settings)
