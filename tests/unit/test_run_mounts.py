"""BuildKit's RUN flags rewritten for the classic builder (envfarm/sandbox/images/runmounts.py)."""

from __future__ import annotations

from envfarm.sandbox.images.runmounts import STAGING, classic_dockerfile


def test_a_dockerfile_without_run_flags_is_unchanged() -> None:
    text = "FROM debian:bookworm-slim\nRUN echo --mount=type=cache,target=/x\n"
    assert classic_dockerfile(text, "Dockerfile") == (text, [])


def test_a_bind_from_a_stage_is_copied_in_before_and_removed_after() -> None:
    text = (
        "FROM uv-image AS uv\nFROM debian\n"
        "RUN --mount=type=bind,from=uv,source=/uv,target=/usr/local/bin/uv \\\n"
        "    --mount=type=cache,target=/root/.cache uv pip install x\n"
        'CMD ["sh"]\n'
    )
    rewritten, warnings = classic_dockerfile(text, "Dockerfile")
    lines = rewritten.split("\n")
    assert lines[2] == f"COPY --from=uv /uv {STAGING}/1"
    assert lines[3].startswith("RUN ")
    assert "--mount" not in lines[3]
    assert f"cp -a {STAGING}/1 /usr/local/bin/uv" in lines[3]
    assert "rm -rf /usr/local/bin/uv" in lines[3]
    assert "rm -rf /root/.cache" in lines[3]
    assert lines[4] == 'CMD ["sh"]'
    assert len(warnings) == 1
    assert "line 3" in warnings[0]


def test_exec_form_heredocs_and_secrets() -> None:
    exec_form = 'FROM d\nRUN --mount=type=cache,target=/c ["make"]\n'
    assert classic_dockerfile(exec_form, "D")[0] == exec_form
    heredoc = "FROM d\nRUN --mount=type=cache,target=/c <<EOF\nmake\nEOF\n"
    rewritten = classic_dockerfile(heredoc, "D")[0].split("\n")
    assert rewritten[1].startswith("RUN ")
    assert "mkdir -p /c" in rewritten[1]
    assert rewritten[2:] == [""], "the heredoc's body is part of the rewritten RUN"
    _, warnings = classic_dockerfile("FROM d\nRUN --mount=type=secret,id=t,target=/s make\n", "D")
    assert any("type=secret cannot be given" in warning for warning in warnings)
