"""Whose fault a failed build is (envfarm/sandbox/docker/images/failures.py) and what is pinned."""

from __future__ import annotations

from envfarm.errors import TaskBuildError
from envfarm.sandbox.docker.images.failures import build_failure
from envfarm.sandbox.images.aliases import match_alias

STEP = "line 4: RUN pip install -r requirements.txt"
NOTES = ["substitutions: none (every base image is the one the Dockerfile names)"]


def test_a_missing_copy_source_is_the_tasks_at_once() -> None:
    error = build_failure(
        "task t",
        "COPY failed: file not found in build context or excluded by .dockerignore: stat x",
        "line 3: COPY x /x",
        NOTES,
        [],
        set(),
    )
    assert isinstance(error, TaskBuildError)
    assert str(error).splitlines()[:2] == [
        "task t: line 3: COPY x /x: COPY failed: file not found in build context or "
        "excluded by .dockerignore: stat x",
        NOTES[0],
    ]


def test_a_failed_run_has_a_signature_unless_a_mirror_timed_out() -> None:
    said = "The command '/bin/sh -c eval \"$(echo cGlw | base64 -d)\"' returned a non-zero code: 1"
    plain = build_failure("task t", said, STEP, NOTES, ["ERROR: no such package"], {"mirror.lan"})
    assert not isinstance(plain, TaskBuildError)
    assert plain.infrastructure
    assert plain.signature is not None
    assert "base64" not in str(plain)
    assert f"{STEP}: returned a non-zero code: 1" in str(plain)
    outside = build_failure(
        "task t", said, STEP, NOTES, ["fatal: unable to access github.com: timed out"], {"m.lan"}
    )
    assert outside.signature == plain.signature
    timeout = ["WARNING: Retrying after connection broken by 'ReadTimeoutError' (m.lan)"]
    mirror = build_failure("task t", said, STEP, NOTES, timeout, {"m.lan"})
    assert mirror.signature is None


def test_a_digest_only_base_is_pinned_not_a_moving_tag() -> None:
    match = match_alias("python@sha256:" + "a" * 64)
    assert match is not None
    assert len(match.warnings) == 1
    assert "pinned by digest" in match.warnings[0]
    assert "moving tag" not in match.warnings[0]
    tagged = match_alias("python:latest@sha256:" + "a" * 64)
    assert tagged is not None
    assert any("moving tag" in w for w in tagged.warnings)
