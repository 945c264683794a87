"""A build error in check's table keeps what failed and the error line, which comes last."""

from __future__ import annotations

from envfarm.check.pipeline import short_error


def test_a_long_build_error_keeps_its_head_and_its_last_lines() -> None:
    log = ["image build failed: task image", *[f"Step {i}/40 : RUN x" for i in range(40)]]
    log.append("E: Unable to locate package nosuchpkg")
    shown = short_error("\n".join(log)).splitlines()
    assert shown[0] == "image build failed: task image"
    assert shown[2] == "..."
    assert shown[-1] == "E: Unable to locate package nosuchpkg"
    assert len(shown) == 13


def test_a_short_error_is_kept_whole() -> None:
    assert short_error("one\ntwo") == "one\ntwo"
