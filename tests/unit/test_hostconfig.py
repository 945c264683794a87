"""Reading and filtering the host configuration images inherit (temp file trees, no Docker)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envfarm.errors import ImageError
from envfarm.sandbox.docker.images.aptconfig import (
    image_apt_sources,
    inheritable_apt_settings,
    parse_apt_conf,
    parse_deb822_sources,
    parse_sources_list,
    render_deb822,
)
from envfarm.sandbox.docker.images.hostconfig import (
    host_pip_config_files,
    inheritable_pip_settings,
    parse_pip_config,
    read_host_config,
)

MIRROR = "http://apt.example.test/debian"
SECURITY = "http://apt.example.test/debian-security"
PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

DEB822 = f"""\
Types: deb
# a comment inside the stanza
URIs: {MIRROR}
Suites: bookworm bookworm-updates
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: {SECURITY}
Suites: bookworm-security
Components: main
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 mQINBF
 -----END PGP PUBLIC KEY BLOCK-----

Types: deb
URIs: http://other.example.test/debian
Suites: bookworm
Components: main
Enabled: no
"""


def test_deb822_stanzas_are_parsed_and_disabled_ones_skipped() -> None:
    sources = parse_deb822_sources(DEB822)
    assert [s.uris for s in sources] == [[MIRROR], [SECURITY]]
    assert sources[0].suites == ["bookworm", "bookworm-updates"]
    assert sources[0].components == ["main", "contrib"]
    key = sources[1].options["Signed-By"]
    assert key.splitlines()[1:3] == ["-----BEGIN PGP PUBLIC KEY BLOCK-----", ""]


def test_deb822_render_round_trips_an_inline_key() -> None:
    sources = parse_deb822_sources(DEB822)
    rendered = "\n".join(render_deb822(source) for source in sources)
    assert " .\n mQINBF" in rendered
    assert parse_deb822_sources(rendered) == sources


def test_one_line_entries_with_options() -> None:
    text = (
        "# comment\n"
        f"deb [arch=amd64 signed-by=/etc/apt/keyrings/x.gpg] {MIRROR} bookworm main\n"
        f"deb-src {MIRROR} bookworm main\n"
        "deb http://short.example.test\n"
    )
    sources = parse_sources_list(text)
    assert len(sources) == 2
    assert sources[0].options == {"Architectures": "amd64", "Signed-By": "/etc/apt/keyrings/x.gpg"}
    assert sources[0].components == ["main"]
    assert sources[1].types == ["deb-src"]


def test_an_image_keeps_only_its_suite_over_the_network(tmp_path: Path) -> None:
    mirrors = tmp_path / "etc/apt/mirrors/debian.list"
    mirrors.parent.mkdir(parents=True)
    mirrors.write_text(f"# list\n{MIRROR} priority:1\n")
    text = (
        f"deb [signed-by=/usr/share/keyrings/vendor.gpg] {MIRROR} bookworm main\n"
        f"deb-src {MIRROR} bookworm main\n"
        f"deb {MIRROR} bullseye main\n"
        "deb https://vendor.example.test/apt nodistro main\n"
        "deb file:/srv/local-repo bookworm main\n"
        "deb mirror+file:/etc/apt/mirrors/debian.list bookworm-backports main\n"
    )
    kept = image_apt_sources(parse_sources_list(text), tmp_path)
    assert [(s.uris, s.suites) for s in kept] == [
        ([MIRROR], ["bookworm"]),
        ([MIRROR], ["bookworm-backports"]),
    ]
    assert kept[0].options == {}, "a keyring only the host has is dropped"


def test_debian_archive_keyring_is_kept() -> None:
    kept = image_apt_sources(parse_deb822_sources(DEB822))
    assert kept[0].options["Signed-By"] == "/usr/share/keyrings/debian-archive-keyring.gpg"
    assert kept[1].options["Signed-By"].startswith("\n-----BEGIN PGP")


APT_CONF = """\
// Acquire::http::Proxy "http://commented.example.test/";
/* block comment Acquire::Retries "9"; */
Acquire::http::Proxy "http://proxy.example.test:3128/";
Acquire {
  https {
    Proxy "http://proxy.example.test:3128/";
    CaInfo "/etc/host/ca.pem";
  };
  Check-Valid-Until "false";
};
# shell-style comment
Acquire::Retries "3";
Acquire::http::Proxy::apt.example.test "DIRECT";
DPkg::Post-Invoke {"/usr/bin/test -e /x && /usr/bin/gdbus call";};
APT::Update::Post-Invoke-Success {"/usr/bin/hook";};
Acquire::IndexTargets::deb::DEP-11 { DefaultEnabled "false"; };
"""


def test_apt_conf_is_flattened() -> None:
    settings = parse_apt_conf(APT_CONF)
    assert ("Acquire::http::Proxy", "http://proxy.example.test:3128/") in settings
    assert ("Acquire::https::Proxy", "http://proxy.example.test:3128/") in settings
    assert ("Acquire::Check-Valid-Until", "false") in settings
    assert ("DPkg::Post-Invoke", "/usr/bin/test -e /x && /usr/bin/gdbus call") in settings
    assert all("commented" not in value and value != "9" for _, value in settings)


def test_only_acquire_proxy_and_check_settings_are_inherited() -> None:
    kept = inheritable_apt_settings(parse_apt_conf(APT_CONF))
    assert kept == [
        ("Acquire::http::Proxy", "http://proxy.example.test:3128/"),
        ("Acquire::https::Proxy", "http://proxy.example.test:3128/"),
        ("Acquire::Check-Valid-Until", "false"),
        ("Acquire::Retries", "3"),
        ("Acquire::http::Proxy::apt.example.test", "DIRECT"),
    ]


def test_pip_settings_drop_everything_pointing_into_the_host() -> None:
    merged = parse_pip_config(
        "[global]\n"
        "index_url = https://pypi.example.test/simple\n"
        "extra-index-url = file:///opt/pypi/simple\n"
        "    https://extra.example.test/simple\n"
        "    /opt/pypi-more/simple\n"
        "find-links = /opt/wheels\n"
        "constraint = /etc/xdg/pip/constraints.txt\n"
        "cert = /etc/host/ca.pem\n"
        "default-timeout = 60\n"
        "[install]\n"
        "trusted-host = pypi.example.test\n"
    )
    assert inheritable_pip_settings(merged) == {
        "index-url": "https://pypi.example.test/simple",
        "extra-index-url": "https://extra.example.test/simple",
        "trusted-host": "pypi.example.test",
        "timeout": "60",
    }


def test_a_file_index_url_is_dropped_entirely() -> None:
    assert inheritable_pip_settings({"index-url": "file:///opt/pypi/simple"}) == {}


def test_pip_config_file_devnull_disables_all_files(tmp_path: Path) -> None:
    assert host_pip_config_files({"PIP_CONFIG_FILE": os.devnull}, tmp_path, tmp_path) == []
    files = host_pip_config_files({"PIP_CONFIG_FILE": "/x/pip.conf"}, tmp_path, tmp_path)
    assert files[-1] == Path("/x/pip.conf")


def _host_tree(root: Path) -> Path:
    """A host like ours: deb822 sources, hooks in apt.conf.d, custom CAs, local pip indexes."""
    (root / "etc/apt/sources.list.d").mkdir(parents=True)
    (root / "etc/apt/sources.list.d/debian.sources").write_text(DEB822)
    (root / "etc/apt/sources.list.d/vendor.list.disabled-by-admin").write_text(
        "deb https://vendor.example.test/apt bookworm main\n"
    )
    (root / "etc/apt/sources.list.d/vendor.sources.disabled").write_text(
        "Types: deb\nURIs: https://vendor.example.test/apt\nSuites: bookworm\n"
    )
    (root / "etc/apt/apt.conf.d").mkdir()
    (root / "etc/apt/apt.conf.d/20packagekit").write_text(
        APT_CONF.split("# shell-style comment\n")[1]
    )
    (root / "etc/apt/apt.conf.d/99proxy").write_text('Acquire::http::Proxy "http://p.test/";\n')
    (root / "etc/apt/apt.conf.d/99old.dpkg-old").write_text('Acquire::Retries "7";\n')
    (root / "etc/xdg/pip").mkdir(parents=True)
    (root / "etc/xdg/pip/pip.conf").write_text("[global]\nconstraint = /etc/xdg/c.txt\n")
    (root / "etc/pip.conf").write_text("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n")
    home = root / "home"
    (home / ".config/pip").mkdir(parents=True)
    (home / ".config/pip/pip.conf").write_text(
        "[global]\nfind-links = /opt/wheels\n"
        "extra-index-url = file:///opt/pypi/simple file:///opt/pypi-more/simple\n"
    )
    ca_dir = root / "usr/local/share/ca-certificates"
    (ca_dir / "corp").mkdir(parents=True)
    (ca_dir / "custom-ca.crt").write_text(PEM)
    (ca_dir / "corp/egress.crt").write_text(PEM.replace("MIIB", "MIIC"))
    (ca_dir / "README").write_text("not a certificate")
    return home


ENV = {
    "PIP_DEFAULT_TIMEOUT": "180",
    "PIP_FIND_LINKS": "/opt/wheels",
    "PIP_CERT": "/etc/ssl/certs/ca-certificates.crt",
    "https_proxy": "http://proxy.example.test:3128",
    "NO_PROXY": "localhost",
}


def test_read_host_config_inherits_mirrors_and_cas_not_host_paths(tmp_path: Path) -> None:
    home = _host_tree(tmp_path)
    config = read_host_config(tmp_path, ENV, home, tmp_path / "site")
    assert config.debian_mirror() == MIRROR
    files = config.image_files()
    pip_conf = files["/etc/pip.conf"].decode()
    assert pip_conf == "[global]\ntimeout = 180\ncert = /etc/ssl/certs/ca-certificates.crt\n"
    sources = files["/etc/apt/sources.list.d/debian.sources"].decode()
    assert MIRROR in sources
    assert SECURITY in sources
    assert "vendor" not in sources
    apt_conf = files["/etc/apt/apt.conf.d/90envfarm-host"].decode()
    assert 'Acquire::http::Proxy "http://p.test/";' in apt_conf
    assert 'Acquire::Retries "3";' in apt_conf
    assert "7" not in apt_conf
    assert "Post-Invoke" not in apt_conf
    assert "gdbus" not in apt_conf
    assert files["/usr/local/share/ca-certificates/custom-ca.crt"].decode() == PEM
    assert "/usr/local/share/ca-certificates/corp/egress.crt" in files
    assert not any(path.endswith("README") for path in files)
    everything = b"".join(files.values()).decode()
    for host_only in ("file://", "/opt/", "find-links", "constraint", "/etc/xdg"):
        assert host_only not in everything
    assert config.proxy_env == {
        "https_proxy": "http://proxy.example.test:3128",
        "NO_PROXY": "localhost",
    }


def test_env_index_settings_override_files(tmp_path: Path) -> None:
    home = _host_tree(tmp_path)
    env = {**ENV, "PIP_INDEX_URL": "https://pypi.example.test/simple", "PIP_TRUSTED_HOST": "x"}
    config = read_host_config(tmp_path, env, home, tmp_path / "site")
    assert config.pip == {
        "index-url": "https://pypi.example.test/simple",
        "trusted-host": "x",
        "timeout": "180",
    }


def test_digest_follows_image_content_not_proxies(tmp_path: Path) -> None:
    home = _host_tree(tmp_path)
    first = read_host_config(tmp_path, ENV, home, tmp_path / "site").digest()
    other_proxy = {**ENV, "https_proxy": "http://elsewhere.example.test:8080"}
    assert read_host_config(tmp_path, other_proxy, home, tmp_path / "site").digest() == first
    (tmp_path / "usr/local/share/ca-certificates/new.crt").write_text(PEM)
    assert read_host_config(tmp_path, ENV, home, tmp_path / "site").digest() != first


def test_a_host_without_sources_leaves_the_mirror_to_debootstrap(tmp_path: Path) -> None:
    config = read_host_config(tmp_path, {}, tmp_path, tmp_path)
    assert config.debian_mirror() is None
    assert set(config.image_files()) == {"/etc/pip.conf"}


def test_a_broken_pip_config_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/pip.conf").write_text("index-url = no section header\n")
    with pytest.raises(ImageError, match=r"etc/pip\.conf"):
        read_host_config(tmp_path, {}, tmp_path / "home", tmp_path)
