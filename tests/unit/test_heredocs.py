"""Dockerfile heredocs as BuildKit reads and runs them (envfarm/sandbox/images/heredocs.py)."""

from __future__ import annotations

import base64
import re

from envfarm.sandbox.images.dockerlines import Source, instructions
from envfarm.sandbox.images.heredocs import CHUNK, shell_text
from envfarm.sandbox.images.runmounts import classic_dockerfile, classic_source
from envfarm.sandbox.images.task_image import dockerfile_bases

PYTHON_HEREDOC = (
    "FROM python:3.12-slim\n"
    "RUN python3 - <<'EOF'\n"
    "from cryptography.hazmat.backends import default_backend\n"
    "FROM = 1\n"
    "EOF\n"
    "COPY app /app\n"
)


def _decoded(line: str) -> str:
    match = re.search(r"echo (\S+) \| base64 -d", line)
    assert match is not None, line
    return base64.b64decode(match.group(1)).decode()


def test_a_heredoc_body_is_no_instruction() -> None:
    found = instructions(PYTHON_HEREDOC)
    assert [i.keyword for i in found] == ["FROM", "RUN", "COPY"]
    assert (found[1].first, found[1].last) == (1, 4)
    assert found[1].heredocs[0].name == "EOF"
    assert found[1].heredocs[0].quoted
    assert dockerfile_bases(PYTHON_HEREDOC, "D") == ["python:3.12-slim"]


def test_a_command_with_a_heredoc_goes_to_the_shell_whole() -> None:
    run = instructions(PYTHON_HEREDOC)[1]
    text, script = shell_text(run, run.args) or ("", True)
    assert not script
    assert text == (
        "python3 - <<'EOF'\nfrom cryptography.hazmat.backends import default_backend\nFROM = 1\nEOF"
    )
    rewritten = classic_dockerfile(PYTHON_HEREDOC, "D")[0].split("\n")
    assert rewritten[0] == "FROM python:3.12-slim"
    assert _decoded(rewritten[1]) == text
    assert rewritten[2:] == ["COPY app /app", ""]


def test_a_heredoc_alone_is_a_script_and_a_shebang_is_executed() -> None:
    text = (
        "FROM d\nRUN <<-EOF\n\techo one\n\tEOF\nRUN <<EOF\n#!/usr/bin/env python3\nprint(1)\nEOF\n"
    )
    first, second = instructions(text)[1:]
    assert shell_text(first, first.args) == ("echo one\n", False)
    assert shell_text(second, second.args) == ("#!/usr/bin/env python3\nprint(1)\n", True)
    rewritten = classic_dockerfile(text, "D")[0].split("\n")
    assert "chmod 755 /.envfarm-heredoc-" in rewritten[2]


def test_a_long_heredoc_is_staged_in_pieces() -> None:
    body = "".join(f"echo {'x' * 70} {n}\n" for n in range(2000))
    rewritten = classic_dockerfile(f"FROM d\nRUN <<EOF\n{body}EOF\n", "D")[0].split("\n")
    pieces = [line for line in rewritten if line.startswith("RUN echo ")]
    assert len(pieces) >= 2
    assert all(len(line) < CHUNK + 100 for line in rewritten)
    assert "base64 -d /.envfarm-heredoc-" in rewritten[-2]


def test_every_step_quotes_the_tasks_own_line() -> None:
    text = "FROM d\nRUN --mount=type=bind,source=a,target=/a \\\n    make\nRUN <<EOF\necho\nEOF\n"
    source = Source.of(text)
    classic_source(source, "D")
    assert source.steps() == [
        "line 1: FROM d",
        "line 2: RUN --mount=type=bind,source=a,target=/a \\ ...",
        "line 2: RUN --mount=type=bind,source=a,target=/a \\ ...",
        "line 4: RUN <<EOF ...",
    ]
