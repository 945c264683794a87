"""The hardening every backend applies to untrusted code, in one place (Docker and Kubernetes).

Every capability is dropped but ``DEFAULT_CAPS``: what a root package install and the usual
service images need to set up their files and drop to their own user. Sidecars (compose
services) get ``SIDECAR_CPUS`` and ``SIDECAR_MEMORY_MB`` each, and no new privileges.
"""

from __future__ import annotations

DEFAULT_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID"]
SIDECAR_CPUS = 1.0
SIDECAR_MEMORY_MB = 1024
SIDECAR_PIDS = 512
