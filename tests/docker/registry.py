"""A Docker registry on loopback for the pull tests: Debian's ``docker-registry`` (the reference
registry server), on a free port, with its own storage, optionally TLS with a self-signed
certificate (trusted by the engine through ``/etc/docker/certs.d``) and htpasswd basic auth."""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import bcrypt

from tests.integration.serve_process import free_port

REGISTRY = Path("/usr/bin/docker-registry")
CERTS_D = Path("/etc/docker/certs.d")


def _self_signed(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "registry.crt", directory / "registry.key"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def docker_config(directory: Path, address: str, user: str, password: str) -> Path:
    """A ``DOCKER_CONFIG`` directory holding credentials for ``address``."""
    directory.mkdir(parents=True, exist_ok=True)
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    (directory / "config.json").write_text(json.dumps({"auths": {address: {"auth": token}}}))
    return directory


@contextmanager
def loopback_registry(
    work: Path, *, tls: bool = False, user: str | None = None, password: str = ""
) -> Iterator[str]:
    """Serve a registry; yields its address ``127.0.0.1:PORT``."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    work.mkdir(parents=True, exist_ok=True)
    lines = [
        "version: 0.1",
        "log: {level: warn}",
        f"storage: {{filesystem: {{rootdirectory: {work / 'storage'}}}}}",
        "http:",
        f"  addr: {address}",
    ]
    trusted: Path | None = None
    if tls:
        cert, key = _self_signed(work)
        lines.append(f"  tls: {{certificate: {cert}, key: {key}}}")
        trusted = CERTS_D / address
        trusted.mkdir(parents=True, exist_ok=True)
        shutil.copy(cert, trusted / "ca.crt")
    if user is not None:
        hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5)).decode()
        (work / "htpasswd").write_text(f"{user}:{hashed}\n")
        lines.append(f"auth: {{htpasswd: {{realm: envfarm-test, path: {work / 'htpasswd'}}}}}")
    (work / "config.yml").write_text("\n".join(lines) + "\n")
    log = (work / "registry.log").open("wb")
    process = subprocess.Popen(
        [str(REGISTRY), "serve", str(work / "config.yml")], stdout=log, stderr=log
    )
    try:
        _wait_listening(port, process, work / "registry.log")
        yield address
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()
        if trusted is not None:
            shutil.rmtree(trusted, ignore_errors=True)


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"docker-registry exited: {log.read_text()}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"docker-registry did not listen on {port}: {log.read_text()}")
