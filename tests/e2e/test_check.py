"""`envfarm check` as a user runs it: the example suite is sound, broken tasks are rejected.

Every broken task below is a small variation of one sound task, so each rejection has exactly
one cause, and the reason printed for it is asserted.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "tasks"

ANSWER_LINE = "the final answer is 42, and this line is long enough to be compared by hash"
TEST_SH = f"""#!/usr/bin/env bash
mkdir -p /logs/verifier
if [ "$(cat /app/answer.txt 2>/dev/null)" = "{ANSWER_LINE}" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
"""
SOLVE_SH = f"#!/usr/bin/env bash\necho '{ANSWER_LINE}' > /app/answer.txt\n"
DOCKERFILE = "FROM debian:bookworm-slim\nRUN mkdir -p /app\nWORKDIR /app\n"
GIT = "git -c user.name=dev -c user.email=dev@example.com"


def envfarm(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envfarm", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        check=False,
    )


def write(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def harbor_task(root: Path, **overrides: str) -> Path:
    files = {
        "task.toml": f'[task]\nname = "check-e2e/{root.name}"\n[environment]\nworkdir = "/app"\n',
        "instruction.md": "Write the final answer into /app/answer.txt.\n",
        "environment/Dockerfile": DOCKERFILE,
        "tests/test.sh": TEST_SH,
        "solution/solve.sh": SOLVE_SH,
    }
    return write(root, {**files, **overrides})


def legacy_task(root: Path, dockerfile: str = "FROM debian:bookworm-slim\nWORKDIR /app\n") -> Path:
    return write(
        root,
        {
            "task.yaml": "instruction: Write the final answer into /app/answer.txt.\n"
            "max_agent_timeout_sec: 120\nmax_test_timeout_sec: 60\n",
            "Dockerfile": dockerfile,
            "run-tests.sh": f'#!/bin/bash\n[ "$(cat /app/answer.txt)" = "{ANSWER_LINE}" ]\n',
            "solution.sh": SOLVE_SH,
            "tests/test_outputs.py": "def test_answer():\n    assert open('/app/answer.txt').read()"
            f" == {ANSWER_LINE + chr(10)!r}\n",
        },
    )


def reasons(output: str) -> dict[str, list[str]]:
    """Task id -> the problem/infra/warning lines printed under it after the table."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in output.splitlines():
        header = re.match(r"^(\S+) \((/.*)\)$", line)
        if header:
            current = found.setdefault(header.group(1), [])
        elif line.startswith("  ") and current is not None:
            current.append(line.strip())
        else:
            current = None
    return found


def test_the_example_suite_is_sound() -> None:
    proc = envfarm("check", "tasks/", "--runs", "2", "--concurrency", "4")
    assert proc.returncode == 0, proc.stderr[-5000:]
    summary = re.search(r"^(\d+) of (\d+) tasks sound$", proc.stderr, re.MULTILINE)
    assert summary is not None, proc.stderr[-3000:]
    sound, total = int(summary.group(1)), int(summary.group(2))
    on_disk = [p for p in TASKS.iterdir() if (p / "task.toml").is_file()]
    assert sound == total == len(on_disk) >= 12
    assert not any(
        line.startswith("problem") for lines in reasons(proc.stderr).values() for line in lines
    )


def test_unsound_tasks_are_rejected_each_with_its_reason(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    harbor_task(tasks / "sound")
    always_one = "#!/bin/bash\nmkdir -p /logs/verifier\necho 1 > /logs/verifier/reward.txt\n"
    harbor_task(tasks / "nop-passes", **{"tests/test.sh": always_one})
    harbor_task(
        tasks / "oracle-fails",
        **{"solution/solve.sh": "#!/bin/bash\necho 'the final answer is 41' > /app/answer.txt\n"},
    )
    harbor_task(
        tasks / "flaky",
        **{
            "tests/test.sh": "#!/bin/bash\nmkdir -p /logs/verifier\n"
            "awk -v r=$RANDOM 'BEGIN { print r / 32767 }' > /logs/verifier/reward.txt\n"
        },
    )
    harbor_task(
        tasks / "answer-in-git",
        **{
            "environment/Dockerfile": "FROM debian:bookworm-slim\n"
            f"RUN mkdir -p /app && cd /app && git init -q && echo '{ANSWER_LINE}' > answer.txt"
            f' && git add . && {GIT} commit -qm "Record the answer"'
            f' && echo draft > answer.txt && {GIT} commit -qam "Start over"\n'
            "WORKDIR /app\n"
        },
    )
    harbor_task(
        tasks / "answer-in-image",
        **{
            "environment/Dockerfile": "FROM debian:bookworm-slim\n"
            f"RUN mkdir -p /app /opt/.cache && echo '{ANSWER_LINE}' > /opt/.cache/blob\n"
            "WORKDIR /app\n"
        },
    )
    legacy_task(
        tasks / "copies-its-tests",
        dockerfile="FROM debian:bookworm-slim\nWORKDIR /app\nCOPY . /app/\n",
    )
    proc = envfarm("check", str(tasks), "--runs", "2", "--concurrency", "4")
    assert proc.returncode == 2, proc.stderr[-5000:]
    found = reasons(proc.stderr)
    problems = {
        task: [line for line in lines if line.startswith("problem")]
        for task, lines in found.items()
    }
    assert problems.get("check-e2e/sound", []) == []
    assert problems["check-e2e/nop-passes"] == [
        "problem nop passes: doing nothing scores 1, the maximum; the tests do not tell a "
        "solved task from an untouched one"
    ]
    [oracle] = problems["check-e2e/oracle-fails"]
    assert oracle.startswith("problem oracle fails: the oracle reaches 0, not the maximum 1")
    [flaky] = problems["check-e2e/flaky"]
    assert flaky.startswith("problem flaky grader: the oracle's rewards differ over 2 runs")
    assert "spread" in flaky
    [git] = problems["check-e2e/answer-in-git"]
    assert git.startswith(
        "problem solution-in-git: what solution/solve.sh writes to /app/answer.txt"
    )
    assert "Record the answer" in git
    [image] = problems["check-e2e/answer-in-image"]
    assert image.startswith("problem solution-in-image: the image holds /opt/.cache/blob")
    copies = problems["copies-its-tests"]
    assert copies[0].startswith("problem tests-in-image: Dockerfile line 3 copies '.'"), copies
    assert (
        "problem tests-in-image: the image holds /app/tests/test_outputs.py, identical to the "
        "hidden tests/test_outputs.py"
    ) in copies
    assert (
        "problem solution-in-image: the image holds /app/solution.sh, identical to the hidden "
        "solution.sh"
    ) in copies
    assert "6 of 7 tasks sound" not in proc.stderr
    assert re.search(r"^1 of 7 tasks sound$", proc.stderr, re.MULTILINE)


def test_a_legacy_task_is_checked_like_any_other(tmp_path: Path) -> None:
    root = legacy_task(tmp_path / "hello-legacy")
    proc = envfarm("check", str(root), "--runs", "2")
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert re.search(r"^1 of 1 tasks sound$", proc.stderr, re.MULTILINE)
    assert any("public network access" in line for line in reasons(proc.stderr)["hello-legacy"])
    assert not (root / "tests" / "test.sh").exists()
    out = tmp_path / "run"
    proc = envfarm("run", str(root), "--policy", "nop", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["completed"], summary["mean_reward"]) == (1, 0.0)


def test_no_run_lints_without_building_and_bad_input_exits_two(tmp_path: Path) -> None:
    good = harbor_task(tmp_path / "tasks" / "good")
    leaky = harbor_task(
        tmp_path / "tasks" / "leaky",
        **{
            "environment/test_copy.sh": TEST_SH + "# copy\n",
            "tests/test_copy.sh": TEST_SH + "# copy\n",
        },
    )
    broken = write(tmp_path / "tasks" / "broken", {"task.toml": "[environment]\ncpus = 'two'\n"})
    proc = envfarm("check", str(good), "--no-run")
    assert proc.returncode == 0, proc.stderr
    assert "lint-only" in proc.stderr
    proc = envfarm("check", str(good), str(leaky), "--no-run")
    assert proc.returncode == 2
    [problem] = [line for line in reasons(proc.stderr)["check-e2e/leaky"] if "problem" in line]
    assert "environment/test_copy.sh is identical to tests/test_copy.sh" in problem
    proc = envfarm("check", str(good), str(broken), "--no-run")
    assert proc.returncode == 2
    assert "bad input" in proc.stderr
    assert "cpus" in proc.stderr
    assert envfarm("check", str(tmp_path / "nothing-here"), "--no-run").returncode == 2


def test_compare_modes_reports_an_outcome_the_clean_room_cannot_carry(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    harbor_task(tasks / "agree")
    # the outcome is a process the agent leaves running: the clean room never has it
    daemon = "#!/usr/bin/env bash\nsetsid sleep 900 >/dev/null 2>&1 < /dev/null &\n"
    running = (
        "#!/usr/bin/env bash\nmkdir -p /logs/verifier\necho 0 > /logs/verifier/reward.txt\n"
        'for f in /proc/[0-9]*/comm; do [ "$(cat "$f" 2>/dev/null)" = sleep ] && '
        "echo 1 > /logs/verifier/reward.txt; done\n"
    )
    harbor_task(tasks / "daemon", **{"solution/solve.sh": daemon, "tests/test.sh": running})
    proc = envfarm("check", str(tasks), "--runs", "1", "--compare-modes")
    assert proc.returncode == 2, proc.stderr[-5000:]
    found = reasons(proc.stderr)
    assert "check-e2e/agree" not in found or not any(
        line.startswith("problem") for line in found["check-e2e/agree"]
    ), proc.stderr[-3000:]
    assert any(
        "verifier modes disagree: the oracle's reward is clean 0, shared 1" in line
        for line in found.get("check-e2e/daemon", [])
    ), proc.stderr[-3000:]


def test_check_says_how_far_it_got_as_it_goes(tmp_path: Path) -> None:
    """Not a terminal: no bars, a line per image and episode, and each task's verdict as soon as
    it is known (before the table), so a killed or hung check's log shows where it was."""
    harbor_task(tmp_path / "tasks" / "sound")
    harbor_task(
        tmp_path / "tasks" / "unbuildable",
        **{"environment/Dockerfile": "FROM debian:bookworm-slim\nRUN exit 3\n"},
    )
    artifacts = tmp_path / "kept"
    proc = envfarm("check", str(tmp_path / "tasks"), "--runs", "1", "--artifacts", str(artifacts))
    # a RUN that fails the same way twice is the task's fault (bad input), not the machine's
    assert proc.returncode == 2, proc.stderr[-5000:]
    lines = proc.stderr.splitlines()
    image = next(n for n, line in enumerate(lines) if line.startswith("image check-e2e/sound: "))
    assert lines.index(f"artifacts under {artifacts}") < image
    table = next(n for n, line in enumerate(lines) if "envfarm check" in line)
    assert lines.index("sound check-e2e/sound") < table
    unbuildable = [n for n, line in enumerate(lines) if line.startswith("unsound check-e2e/unb")]
    assert unbuildable, proc.stderr[-3000:]
    assert unbuildable[0] < table
    assert "build: " in lines[unbuildable[0]]
    episodes = [line for line in lines if line.startswith(("oracle check-e2e/", "nop check-e2e/"))]
    assert len(episodes) == 2, episodes
    assert all("; artifacts artifacts/" in line for line in episodes), episodes
    assert any(
        line.startswith("oracle check-e2e/sound ") and "reward 1" in line for line in episodes
    )
    assert not re.search(r"\b(images|episodes) +\S*━", proc.stderr)  # no bars off a terminal
