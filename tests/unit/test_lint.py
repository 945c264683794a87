"""Static task lint: test scripts, leaks into the build context, network, max reward."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfarm.spec.lint import (
    Finding,
    dockerfile_copy_sources,
    is_test_code,
    lint_task,
    lint_test_script,
    max_reward,
)
from envfarm.spec.task import Task, load_task

TEST_CODE = "def test_answer():\n    assert open('/app/answer.txt').read() == '42\\n'  # hidden\n"
SOLVE = (
    "#!/usr/bin/env bash\n# the reference solution writes the answer\necho 42 > /app/answer.txt\n"
)


def make_task(
    root: Path,
    *,
    toml: str = "",
    dockerfile: str = "FROM debian:bookworm-slim\n",
    files: dict[str, str] | None = None,
    solve: bool = True,
) -> Task:
    files = {
        "task.toml": toml,
        "instruction.md": "Write 42 to /app/answer.txt.\n",
        "environment/Dockerfile": dockerfile,
        "tests/test.sh": "#!/usr/bin/env bash\necho 1 > /logs/verifier/reward.txt\n",
        "tests/test_answer.py": TEST_CODE,
        **({"solution/solve.sh": SOLVE} if solve else {}),
        **(files or {}),
    }
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return load_task(root)


def rules(findings: list[Finding], severity: str) -> list[str]:
    return [f.rule for f in findings if f.severity == severity]


def advice(task: Task) -> list[Finding]:
    """The errors and warnings (not the info findings, e.g. on the network default)."""
    return [f for f in lint_task(task) if f.severity != "info"]


def test_a_clean_task_has_no_findings(tmp_path: Path) -> None:
    assert advice(make_task(tmp_path / "t")) == []


def test_test_script_shebang_must_be_a_shell(tmp_path: Path) -> None:
    script = tmp_path / "test.sh"
    for good in (
        "#!/bin/bash\ntrue\n",
        "#!/usr/bin/env bash\ntrue\n",
        "#!/bin/sh\ntrue\n",
        "true\n",
    ):
        script.write_text(good)
        assert lint_test_script(script) == [], good
    script.write_text("#!/usr/bin/env python3\nprint('hi')\n")
    [finding] = lint_test_script(script)
    assert finding.severity == "error"
    assert "python3" in finding.message
    assert "bash test.sh" in finding.message


def test_test_script_syntax_crlf_binary_and_empty(tmp_path: Path) -> None:
    script = tmp_path / "test.sh"
    script.write_text("if true; then\n  echo unterminated\n")
    [finding] = lint_test_script(script)
    assert "bash -n" in finding.message
    script.write_bytes(b"echo 1\r\necho 2\r\n")
    assert "CRLF" in lint_test_script(script)[0].message
    script.write_bytes(b"\x7fELF\x00\x01")
    assert "binary" in lint_test_script(script)[0].message
    script.write_text("  \n")
    assert "empty" in lint_test_script(script)[0].message
    assert "cannot read" in lint_test_script(tmp_path / "missing.sh")[0].message


def test_missing_solution_is_an_error(tmp_path: Path) -> None:
    findings = lint_task(make_task(tmp_path / "t", solve=False))
    assert rules(findings, "error") == ["solution"]
    assert "oracle" in findings[0].message


def test_hidden_test_code_in_the_build_context_is_an_error(tmp_path: Path) -> None:
    task = make_task(tmp_path / "t", files={"environment/vendor/test_answer.py": TEST_CODE})
    [finding] = advice(task)
    assert (finding.severity, finding.rule) == ("error", "tests-in-image")
    assert "environment/vendor/test_answer.py" in finding.message
    assert "tests/test_answer.py" in finding.message


def test_the_solve_script_in_the_build_context_is_an_error(tmp_path: Path) -> None:
    task = make_task(tmp_path / "t", files={"environment/setup.sh": SOLVE})
    [finding] = advice(task)
    assert (finding.severity, finding.rule) == ("error", "tests-in-image")
    assert "solution/solve.sh" in finding.message


def test_identical_fixtures_and_tiny_files_are_not_errors(tmp_path: Path) -> None:
    data = "region,amount\n" + "north,12.50\n" * 10
    task = make_task(
        tmp_path / "t",
        files={
            "environment/data.csv": data,
            "tests/data/data.csv": data,
            "environment/__init__.py": "",
            "tests/__init__.py": "",
        },
    )
    findings = lint_task(task)
    assert rules(findings, "error") == []
    assert rules(findings, "warning") == ["tests-in-image"]
    assert "fixture" in findings[0].message


def test_dockerfile_copy_sources_are_parsed() -> None:
    text = (
        "FROM debian:bookworm-slim AS base\n"
        "# COPY commented /out\n"
        "COPY --chown=1000:1000 app/ lib.py /app/\n"
        "ADD ./data \\\n    /data\n"
        'COPY ["with space.txt", "/x/"]\n'
        "COPY --from=base /etc/passwd /tmp/\n"
        "COPY <<EOF /etc/motd\nhello\nEOF\n"
        "RUN echo COPY tests /nowhere\n"
    )
    assert dockerfile_copy_sources(text) == [
        (3, ["app/", "lib.py"]),
        (4, ["./data"]),
        (6, ["with space.txt"]),
    ]


def test_copying_the_whole_legacy_task_copies_its_tests(tmp_path: Path) -> None:
    root = tmp_path / "legacy"
    root.mkdir()
    (root / "task.yaml").write_text("instruction: Write 42 to /app/answer.txt.\n")
    (root / "Dockerfile").write_text("FROM debian:bookworm-slim\nCOPY . /app/\n")
    (root / "run-tests.sh").write_text("#!/bin/bash\ngrep -q 42 /app/answer.txt\n")
    (root / "solution.sh").write_text("echo 42 > /app/answer.txt\n")
    (root / "tests").mkdir()
    task = load_task(root)
    findings = [f for f in lint_task(task) if f.severity == "error"]
    assert [f.rule for f in findings] == ["tests-in-image"]
    assert "Dockerfile line 2 copies '.'" in findings[0].message


def test_copying_a_path_outside_the_hidden_ones_is_fine(tmp_path: Path) -> None:
    root = tmp_path / "legacy"
    root.mkdir()
    (root / "task.yaml").write_text("instruction: Write 42 to /app/answer.txt.\n")
    (root / "Dockerfile").write_text("FROM debian:bookworm-slim\nCOPY src/ /app/\n")
    (root / "src").mkdir()
    (root / "run-tests.sh").write_text("#!/bin/bash\ngrep -q 42 /app/answer.txt\n")
    (root / "solution.sh").write_text("echo 42 > /app/answer.txt\n")
    assert [f for f in lint_task(load_task(root)) if f.rule == "tests-in-image"] == []


def test_public_network_and_downloads_at_grading_are_warnings(tmp_path: Path) -> None:
    task = make_task(
        tmp_path / "t",
        toml='[environment]\nnetwork_mode = "public"\n',
        files={"tests/test.sh": "#!/bin/bash\npip install pytest\npytest /tests\n"},
    )
    findings = lint_task(task)
    assert rules(findings, "error") == []
    assert rules(findings, "warning") == ["network", "network"]
    assert "public network access (agent and verifier)" in findings[0].message
    assert "line 2" in findings[1].message
    assert "depends on the network" in findings[1].message
    shared = make_task(
        tmp_path / "u",
        toml='[verifier]\nenvironment_mode = "shared"\n',
        files={"tests/test.sh": "#!/bin/bash\ncurl -sO http://x/y\n"},
    )
    [finding] = advice(shared)
    assert "grading has no network, so this will fail" in finding.message


def test_the_verifiers_network_default_is_stated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def network(task: Task) -> list[Finding]:
        return [f for f in lint_task(task) if f.rule == "network"]

    downloads = {"tests/test.sh": "#!/bin/bash\npip install pytest==8.2.2\n"}
    default = make_task(tmp_path / "default", files=downloads)
    stated, download = network(default)
    assert stated.severity == "info"
    said = "the verifier, once no process of the agent's runs, has public network access"
    assert said in stated.message
    assert (download.severity, download.message.split(":")[0]) == (
        "warning",
        "test.sh line 2 (`pip install`) downloads at grading time",
    )
    assert "grading then depends on the network" in download.message

    shared = make_task(tmp_path / "shared", toml='[verifier]\nenvironment_mode = "shared"\n')
    [stated] = network(shared)
    assert "because it runs in the agent's container (shared mode)" in stated.message

    monkeypatch.setenv("ENVFARM_VERIFIER_NETWORK", "none")
    stated, download = network(make_task(tmp_path / "strict", files=downloads))
    assert "because ENVFARM_VERIFIER_NETWORK=none" in stated.message
    assert "grading has no network, so this will fail" in download.message

    asked = make_task(tmp_path / "asked", toml='[verifier]\nnetwork_mode = "no-network"\n')
    assert network(asked) == []


def test_max_reward_comes_from_metadata(tmp_path: Path) -> None:
    assert max_reward(make_task(tmp_path / "a")) == 1.0
    task = make_task(tmp_path / "b", toml="[metadata]\nmax_reward = 10\n")
    assert max_reward(task) == 10.0
    assert advice(task) == []
    bad = make_task(tmp_path / "c", toml='[metadata]\nmax_reward = "ten"\n')
    [finding] = advice(bad)
    assert (finding.severity, finding.rule) == ("error", "max-reward")
    assert "'ten'" in finding.message


def test_what_counts_as_test_code() -> None:
    for name in ("test_x.py", "x_test.go", "app.spec.js", "conftest.py", "test.sh", "tests_io.rs"):
        assert is_test_code(Path(name)), name
    for name in ("reference_orders.py", "data.csv", "testdata.json", "latest.py", "expected.txt"):
        assert not is_test_code(Path(name)), name
