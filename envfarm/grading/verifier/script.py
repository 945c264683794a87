"""Grading by the task's own ``tests/test.sh``, in the agent's container (Harbor's shared mode).

The tests are uploaded only now, after the agent has stopped, over anything the agent put at
``/tests``. ``/logs/verifier`` is wiped first, so a reward file the agent planted is never read.
``run_verifier`` runs ``test.sh`` and brings back what it left in ``/logs/verifier`` (the reward
file, test reports, ``test-stdout.txt``); ``verdict.score`` turns that into the reward. A verifier
that times out or writes no reward raises ``GradingError``: the reward is invalid, with the
reason and the tail of the verifier's output, never a 0.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping

from envfarm.errors import GradingError
from envfarm.grading.base import Graded, Grader
from envfarm.grading.verifier.own_image import own_image
from envfarm.grading.verifier.report_checks import EXIT_CODE_FILE
from envfarm.grading.verifier.reports import CONVENTIONAL_REPORTS
from envfarm.grading.verifier.verdict import (
    REWARD_FILES,
    STDOUT_FILE,
    VerifierOutput,
    expected_reports,
    score,
)
from envfarm.plan.models import VerifierPlan
from envfarm.sandbox.base import Sandbox, free_disk_reserve
from envfarm.sandbox.files import upload_dir

VERIFIER_DIR = "/logs/verifier"
TESTS_DIR = "/tests"
MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_FILES = 200
STDOUT_TAIL_BYTES = 2 * 1024 * 1024
_VAR = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")
_LISTED = re.compile(r"^(\d+) (.+)$")


def expand_env(values: Mapping[str, str], host_env: Mapping[str, str]) -> dict[str, str]:
    """Resolve ``${VAR}`` and ``${VAR:-default}`` in [verifier].env from envfarm's environment."""

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        return host_env.get(name) or (default if default is not None else "")

    return {key: _VAR.sub(substitute, value) for key, value in values.items()}


class TestScriptGrader(Grader):
    __test__ = False  # not a pytest class

    async def grade(self, sandbox: Sandbox, plan: VerifierPlan) -> Graded:
        output = await self.run_verifier(sandbox, plan)
        try:
            return Graded(score(output, plan.config, expected_reports(plan)), output)
        except GradingError as exc:
            exc.output = output
            raise

    async def run_verifier(self, sandbox: Sandbox, plan: VerifierPlan) -> VerifierOutput:
        """Run ``tests/test.sh``; raise only when the sandbox itself fails."""
        verifier = plan.config
        fresh_logs = f"rm -rf {VERIFIER_DIR} && mkdir -p {VERIFIER_DIR}"
        await free_disk_reserve(sandbox)
        if own_image(plan) is None:
            await upload_dir(
                sandbox, plan.tests_dir, TESTS_DIR, first=fresh_logs, identity=plan.task_hash
            )
        else:  # the verifier's own image holds the tests
            await sandbox.exec(fresh_logs, timeout=60.0)
        env = {**plan.env, **expand_env(verifier.env, os.environ)}
        result = await sandbox.exec(
            f"bash {TESTS_DIR}/test.sh > {VERIFIER_DIR}/{STDOUT_FILE} 2>&1",
            timeout=verifier.timeout_sec,
            workdir=plan.workdir,
            env=env,
            user=verifier.user or "root",
        )
        output = VerifierOutput(
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            timeout_sec=verifier.timeout_sec,
            duration_s=result.duration_s,
        )
        await collect_verifier_files(sandbox, output, expected_reports(plan))
        return output


async def collect_verifier_files(
    sandbox: Sandbox, output: VerifierOutput, expected: list[str]
) -> None:
    """Bring ``/logs/verifier`` back into ``output.files`` (capped; big logs as their tail).

    The files a verdict reads are also asked for by name, in case the listing missed them."""
    listing = await sandbox.exec(
        f"cd {VERIFIER_DIR} 2>/dev/null && find . -type f -exec stat -c '%s %n' {{}} +",
        user="root",
        timeout=60,
    )
    entries = []
    for line in listing.stdout.splitlines():
        match = _LISTED.match(line)
        if match:
            entries.append((int(match.group(1)), match.group(2).removeprefix("./")))
    entries.sort(key=lambda entry: (entry[1] != STDOUT_FILE, entry[1]))
    for size, name in entries[:MAX_FILES]:
        path = f"{VERIFIER_DIR}/{name}"
        if size > MAX_FILE_BYTES:
            if name == STDOUT_FILE:
                tail = await sandbox.exec(
                    f"tail -c {STDOUT_TAIL_BYTES} {shlex.quote(path)}", user="root", timeout=60
                )
                output.files[name] = tail.stdout.encode()
                output.omitted[name] = f"{size} bytes, only the last {STDOUT_TAIL_BYTES} kept"
            else:
                output.omitted[name] = f"{size} bytes, over the {MAX_FILE_BYTES}-byte limit"
            continue
        try:
            output.files[name] = await sandbox.read_file(path)
        except OSError as exc:
            output.omitted[name] = f"could not be read: {exc}"
    for _, name in entries[MAX_FILES:]:
        output.omitted[name] = f"more than {MAX_FILES} files in {VERIFIER_DIR}"
    wanted = (STDOUT_FILE, *REWARD_FILES, EXIT_CODE_FILE, *CONVENTIONAL_REPORTS, *expected)
    for name in dict.fromkeys(wanted):
        if name in output.files or name in output.omitted:
            continue
        try:
            output.files[name] = await sandbox.read_file(f"{VERIFIER_DIR}/{name}")
        except (FileNotFoundError, IsADirectoryError):
            continue
        except OSError as exc:
            output.omitted[name] = f"could not be read: {exc}"
