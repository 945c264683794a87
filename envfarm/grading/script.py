"""Grading by the task's own ``tests/test.sh``, in the agent's container (Harbor's shared mode).

The tests are uploaded only now, after the agent has stopped, over anything the agent put at
``/tests``. ``/logs/verifier`` is wiped first, so a reward file the agent planted is never read.
A verifier that times out or writes no reward raises ``GradingError``: the reward is invalid,
with the reason and the tail of the verifier's output, never a 0.
"""

from __future__ import annotations

import os
import re

from envfarm.errors import GradingError
from envfarm.grading.base import Grader
from envfarm.grading.reward import parse_reward_json, parse_reward_txt
from envfarm.models.trajectory import Reward
from envfarm.sandbox.base import Sandbox
from envfarm.sandbox.files import upload_dir
from envfarm.spec.task import Task

VERIFIER_DIR = "/logs/verifier"
TESTS_DIR = "/tests"
_VAR = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def expand_env(values: dict[str, str], host_env: dict[str, str]) -> dict[str, str]:
    """Resolve ``${VAR}`` and ``${VAR:-default}`` in [verifier].env from envfarm's environment."""

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        return host_env.get(name) or (default if default is not None else "")

    return {key: _VAR.sub(substitute, value) for key, value in values.items()}


class TestScriptGrader(Grader):
    __test__ = False  # not a pytest class

    def __init__(self, output_tail_lines: int = 30) -> None:
        self.output_tail_lines = output_tail_lines

    async def grade(self, sandbox: Sandbox, task: Task) -> Reward:
        verifier = task.config.verifier
        await sandbox.exec(f"rm -rf {VERIFIER_DIR} && mkdir -p {VERIFIER_DIR}", user="root")
        await upload_dir(sandbox, task.tests_dir, TESTS_DIR)
        env = {**task.config.environment.env, **expand_env(verifier.env, dict(os.environ))}
        result = await sandbox.exec(
            f"bash {TESTS_DIR}/test.sh > {VERIFIER_DIR}/test-stdout.txt 2>&1",
            timeout=verifier.timeout_sec,
            workdir=task.config.environment.workdir,
            env=env,
            user=verifier.user or "root",
        )
        output = await self._read_text(sandbox, f"{VERIFIER_DIR}/test-stdout.txt")
        if result.timed_out:
            raise GradingError(
                f"the verifier timed out after {verifier.timeout_sec:g}s{self._tail(output)}"
            )
        for name, parse in (("reward.json", parse_reward_json), ("reward.txt", parse_reward_txt)):
            try:
                text = (await sandbox.read_file(f"{VERIFIER_DIR}/{name}")).decode()
            except FileNotFoundError:
                continue
            except UnicodeDecodeError as exc:
                raise GradingError(f"{name} is not UTF-8 text") from exc
            return parse(text)
        raise GradingError(
            f"tests/test.sh wrote no reward file (exit code {result.exit_code}); "
            f"it must write {VERIFIER_DIR}/reward.json or reward.txt{self._tail(output)}"
        )

    async def _read_text(self, sandbox: Sandbox, path: str) -> str:
        try:
            return (await sandbox.read_file(path)).decode(errors="replace")
        except OSError:
            return ""

    def _tail(self, output: str) -> str:
        lines = output.rstrip().splitlines()[-self.output_tail_lines :]
        return ("; verifier output ends with:\n" + "\n".join(lines)) if lines else ""
