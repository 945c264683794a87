"""Which storage drivers ``docker info`` says can limit a container's disk."""

from __future__ import annotations

from envfarm.sandbox.docker.storage import driver_from_info


def test_overlay2_on_ext4_cannot_limit_and_says_why() -> None:
    info = {"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "extfs"]]}
    support = driver_from_info(info)
    assert not support.enforced
    assert (
        support.reason
        == "the engine's storage driver overlay2 on extfs cannot limit a container's disk"
    )


def test_drivers_worth_probing() -> None:
    assert driver_from_info(
        {"Driver": "btrfs", "DriverStatus": [["Build Version", "6.2"]]}
    ).enforced
    assert driver_from_info({"Driver": "zfs"}).enforced
    xfs = {"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "xfs"]]}
    assert driver_from_info(xfs).enforced


def test_unknown_or_missing_driver_cannot_limit() -> None:
    assert not driver_from_info({}).enforced
    assert not driver_from_info({"Driver": "vfs", "DriverStatus": None}).enforced
