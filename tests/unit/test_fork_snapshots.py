"""What a frozen sidecar's copies must keep of its file system (``snapshots.changes_to_keep``),
and how a copy's sidecar is held at its gate (``gates.held``)."""

from __future__ import annotations

from envfarm.sandbox.docker.gates import held
from envfarm.sandbox.docker.snapshots import changes_to_keep
from envfarm.spec.compose import ComposeService

CHANGED, ADDED, DELETED = 0, 1, 2
SEED = "/docker-entrypoint-initdb.d/01-seed.sh"


def diff(*entries: tuple[str, int]) -> list[dict[str, object]]:
    return [{"Path": path, "Kind": kind} for path, kind in entries]


def test_a_database_whose_data_is_in_its_volume_keeps_nothing() -> None:
    changes = diff(
        ("/docker-entrypoint-initdb.d", CHANGED),
        (SEED, ADDED),  # a bind file envfarm puts in every copy too
        ("/usr", CHANGED),
        ("/usr/sbin", CHANGED),
        ("/usr/sbin/docker-init", ADDED),  # the engine's init's mount point
        ("/run", CHANGED),
        ("/run/postgresql", CHANGED),  # its socket, gone at a restart
        ("/var/lib/postgresql/data", CHANGED),
    )
    assert changes_to_keep(changes, [SEED, "/var/lib/postgresql/data"]) == []


def test_files_written_outside_the_volumes_are_kept() -> None:
    changes = diff(
        ("/srv", CHANGED),
        ("/srv/token", ADDED),
        ("/etc", CHANGED),
        ("/etc/app.conf", DELETED),
        ("/tmp", CHANGED),
        ("/tmp/scratch", ADDED),
        ("/var/runner", ADDED),  # not under /var/run
    )
    assert changes_to_keep(changes, []) == ["/srv/token", "/etc/app.conf", "/var/runner"]


def test_a_directory_changed_with_nothing_under_it_is_kept() -> None:
    # A file made and removed again leaves its directory's times changed: kept, to be safe.
    assert changes_to_keep(diff(("/root", CHANGED)), []) == ["/root"]
    assert changes_to_keep(diff(("/", CHANGED), ("/data", ADDED)), ["/data"]) == []


def service(**fields: object) -> ComposeService:
    return ComposeService.model_validate({"name": "db", **fields})


def test_a_held_service_runs_what_the_engine_would_once_let_go() -> None:
    image = {"Entrypoint": ["docker-entrypoint.sh"], "Cmd": ["postgres"]}
    hold = held(service(), image, "e1")
    assert hold is not None
    assert hold.entrypoint[:2] == ["/bin/sh", "-c"]
    assert hold.command == ["docker-entrypoint.sh", "postgres"]
    assert hold.bind == "envfarm-e1-gate:/.envfarm-gate:ro"
    command = held(service(command=["postgres", "-c", "fsync=off"]), image, "e1")
    assert command is not None
    assert command.command == ["docker-entrypoint.sh", "postgres", "-c", "fsync=off"]
    # The compose file's entrypoint clears the image's command, as under Docker.
    entry = held(service(entrypoint=["/start.sh"]), image, "e1")
    assert entry is not None
    assert entry.command == ["/start.sh"]
    assert held(service(), {"Entrypoint": None, "Cmd": None}, "e1") is None
