"""Scripts for the fake model server that answer in installed agents' own formats.

``oracle_commands`` turns a task's reference solution into shell commands (the solution's
files written under ``/solution``, then ``solve.sh`` run), so a fake server can drive a real
harness to a task's solution. ``mini_swe_agent_planner`` answers as mini-swe-agent's default
config expects: one ``bash`` tool call per step, then its submit command on its own.
``codex_planner`` answers Codex CLI's ``shell`` tool the same way and ends with a message.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envfarm.testing.fake_vllm import Planner, steps_done
from envfarm.testing.scripted import ScriptedCompletion, completion, tool_call

MINI_SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def oracle_commands(task_dir: Path) -> list[str]:
    solution = task_dir / "solution"
    commands = ["mkdir -p /solution"]
    for path in sorted(p for p in solution.rglob("*") if p.is_file()):
        encoded = base64.b64encode(path.read_bytes()).decode()
        target = f"/solution/{path.relative_to(solution)}"
        commands.append(f'mkdir -p "$(dirname {target})" && echo {encoded} | base64 -d > {target}')
    commands.append("bash /solution/solve.sh")
    return [" && ".join(commands)]


def mini_swe_agent_planner(commands: Sequence[str]) -> Planner:
    def plan(request: dict[str, Any]) -> ScriptedCompletion:
        done = steps_done(request.get("messages", []))
        if done < len(commands):
            return completion(
                f"THOUGHT: step {done + 1}.", tool_call("bash", {"command": commands[done]})
            )
        return completion("THOUGHT: the task is done.", tool_call("bash", {"command": MINI_SUBMIT}))

    return plan
