"""The run's summary as the terminal shows it: bad-input errors are never cut."""

from __future__ import annotations

from rich.console import Console

from envfarm.cli.render import summary_table
from envfarm.controller.summary import RunSummary

REASON = (
    "tasks/broken/task.toml: agent.timeout_sec: expected a positive number of seconds, got "
    "'ten minutes' (a Harbor task writes 600.0)\nand a second line that says what to do next"
)


def shown(summary: RunSummary, width: int) -> str:
    console = Console(width=width, record=True, soft_wrap=True)
    console.print(summary_table(summary))
    return console.export_text()


def test_a_bad_input_error_is_shown_whole_below_the_table() -> None:
    summary = RunSummary(
        job_id="job-1", policy="oracle", model="oracle", episodes=0, completed=0,
        infra_errors=0, mean_reward=None, tasks={}, bad_inputs={"tasks/broken": REASON},
        duration_s=1.0, exit_code=2,
    )  # fmt: skip
    for width in (60, 200):
        text = shown(summary, width)
        assert REASON in text, text
        assert "bad input" in text.split(REASON)[0]  # the table still marks the row
