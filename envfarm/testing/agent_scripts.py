"""Scripts for the fake model server that answer in installed agents' own formats.

``oracle_commands`` turns a task's reference solution into shell commands (the solution's
files written under ``/solution``, then ``solve.sh`` run), so a fake server can drive a real
harness to a task's solution. ``mini_swe_agent_planner`` answers as mini-swe-agent's default
config expects: one ``bash`` tool call per step, then its submit command on its own.
``codex_planner`` answers Codex CLI's ``exec_command`` tool the same way (polling a command
still running with ``write_stdin``) and ends with a plain message, which ends ``codex exec``.
``by_instruction`` serves many tasks from one server: it picks each request's task by the
instruction found in the agent's messages (both harnesses pass it verbatim).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from envfarm.testing.fake_vllm import Planner, steps_done
from envfarm.testing.scripted import ScriptedCompletion, completion, tool_call

MINI_SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
CODEX_DONE = "The task is done."
CODEX_YIELD_MS = 30000
"""The longest a Codex ``exec_command`` waits before answering that the command still runs."""
_RUNNING = re.compile(r"Process running with session ID (\d+)")


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


def codex_planner(commands: Sequence[str]) -> Planner:
    def plan(request: dict[str, Any]) -> ScriptedCompletion:
        messages = request.get("messages", [])
        last = messages[-1] if messages else {}
        running = (
            _RUNNING.search(str(last.get("content") or "")) if last.get("role") == "tool" else None
        )
        if running:
            poll = {
                "session_id": int(running.group(1)),
                "chars": "",
                "yield_time_ms": CODEX_YIELD_MS,
            }
            return completion(None, tool_call("write_stdin", poll))
        done = sum(
            1
            for m in messages
            if m.get("role") == "assistant"
            for call in m.get("tool_calls") or []
            if call.get("function", {}).get("name") == "exec_command"
        )
        if done < len(commands):
            run = {"cmd": commands[done], "yield_time_ms": CODEX_YIELD_MS}
            return completion(None, tool_call("exec_command", run))
        return completion(CODEX_DONE)

    return plan


AGENT_PLANNERS: dict[str, Callable[[Sequence[str]], Planner]] = {
    "mini-swe-agent": mini_swe_agent_planner,
    "codex": codex_planner,
}


def by_instruction(planners: Mapping[str, Planner]) -> Planner:
    """One planner per task instruction; a request is routed by the instruction its user
    messages contain (the longest match wins). No match: a plain answer saying so."""
    ordered = sorted(planners.items(), key=lambda item: -len(item[0]))

    def plan(request: dict[str, Any]) -> ScriptedCompletion:
        texts = [
            str(m.get("content") or "")
            for m in request.get("messages", [])
            if m.get("role") == "user"
        ]
        for instruction, planner in ordered:
            if any(instruction in text for text in texts):
                return planner(request)
        return completion("No task of this script matches the request.")

    return plan


def oracle_planner(agent: str, task_dirs: Sequence[Path]) -> Planner:
    """``agent``'s planner solving each of ``task_dirs`` with its reference solution."""
    make = AGENT_PLANNERS[agent]
    return by_instruction(
        {(d / "instruction.md").read_text().strip(): make(oracle_commands(d)) for d in task_dirs}
    )
