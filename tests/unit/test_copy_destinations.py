"""``COPY``/``ADD`` to ``.`` read as BuildKit reads it (envfarm/sandbox/images/copydests.py)."""

from __future__ import annotations

from envfarm.sandbox.images.dockerlines import Source
from envfarm.sandbox.images.runmounts import classic_dockerfile, classic_source


def test_a_destination_of_dot_gets_its_slash() -> None:
    text = (
        "FROM d\nWORKDIR /app\nCOPY server.py persona.md .\n"
        "ADD --chown=1:1 *.cfg \\\n    .\n"
        'COPY ["a b", "c", "."]\n'
    )
    assert classic_dockerfile(text, "D")[0].split("\n") == [
        "FROM d",
        "WORKDIR /app",
        "COPY server.py persona.md ./",
        "ADD --chown=1:1 *.cfg ./",
        'COPY ["a b", "c", "./"]',
        "",
    ]


def test_other_destinations_and_heredocs_are_left_as_written() -> None:
    text = "FROM d\nCOPY a b /app/\nCOPY a /app/x\nCOPY ./ ./\nCOPY <<EOF .\nhi\nEOF\n"
    assert classic_dockerfile(text, "D")[0] == text


def test_a_rewritten_copy_is_quoted_as_the_tasks_own_line() -> None:
    source = Source.of("FROM d\nCOPY a \\\n  b .\nRUN x\n")
    classic_source(source, "D")
    assert source.steps() == ["line 1: FROM d", "line 2: COPY a \\ ...", "line 4: RUN x"]
