"""The TRL adapter against TRL's own code, in TRL's virtualenv (scripts/trainer-venv trl).

The groups are real sessions of envfarm's agent loop (tests/trainer_groups.py); the check script
(tests/trainers/trl_check.py) maps them to TRL's ``RolloutSample``s and packs them with TRL's
collator, and runs a live ``EnvfarmRolloutWorker`` against this process's API server. Here the
report is compared with what the trajectories say, token by token.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

from envfarm.agent.tools import tool_schemas
from envfarm.api import create_app
from envfarm.api.server import ApiServer
from envfarm.integrations.feed import FedGroup
from envfarm.models.jobs import DeliveredGroup, JobRequest
from tests.trainer_groups import real_group
from tests.unit.api_double import MemoryService

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "trl-token"


def trl_python() -> Path:
    """The cached TRL virtualenv's Python: CI and ``scripts/setup --tests`` create it."""
    where = subprocess.run([ROOT / "scripts" / "trainer-venv", "trl", "--path"],
                           check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    python = Path(where) / "bin" / "python"
    assert (Path(where) / ".complete").exists(), (
        f"no TRL virtualenv at {where}: run scripts/setup --tests (or scripts/trainer-venv trl)"
    )
    return python


def expected_terms(groups: list[DeliveredGroup]) -> tuple[list[int], list[float], list[float]]:
    """Per trained token, from the trajectories' own turns: the token, its logprob, the
    advantage TRL should weigh it with (0 for an invalid episode)."""
    labels, logprobs, advantages = [], [], []
    for group in groups:
        fed = FedGroup.of(group)
        for trajectory, rows in zip(fed.trajectories, fed.rows(), strict=True):
            turns = {turn.index: turn for turn in trajectory.turns}
            advantage = trajectory.advantage if trajectory.reward.valid else 0.0
            for row in rows:
                for index in row.turns:
                    labels += turns[index].completion_token_ids or []
                    logprobs += turns[index].logprobs or []
                    advantages += [advantage or 0.0] * len(turns[index].completion_token_ids or [])
    return labels, logprobs, advantages


async def run_check(groups_file: Path, url: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRL_EXPERIMENTAL_SILENCE": "1"}
    process = await asyncio.create_subprocess_exec(
        str(trl_python()), str(ROOT / "tests" / "trainers" / "trl_check.py"), str(groups_file),
        url, TOKEN, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()[-4000:]
    report: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return report


async def test_trl_packs_envfarm_groups_token_for_token_and_the_worker_keeps_trls_staleness(
    tmp_path: Path,
) -> None:
    offline = [await real_group(1), await real_group(2, version="4", dispatch_version="4")]
    fresh, stale, late = (
        await real_group(1, dispatch_version="3"),
        await real_group(2, version="0", dispatch_version="0"),
        await real_group(3, version="4", dispatch_version="4"),
    )
    live_samples = sum(
        1
        for g in (fresh, late)
        for rows in FedGroup.of(g).rows()
        for r in rows
        if any(r.response_mask)
    )
    groups_file = tmp_path / "groups.json"
    groups_file.write_text(json.dumps({"groups": [g.model_dump(mode="json") for g in offline],
                                       "live_samples": live_samples}))  # fmt: skip
    service = MemoryService()
    job = JobRequest.model_validate({"tasks": ["alpha"], "policy": {"base_url": "oracle"}})
    job_id = await service.submit(job)
    service.delivered[job_id] += [fresh, stale, late]
    app = create_app(service, token=TOKEN, keepalive_s=0.2)
    async with ApiServer(app, graceful_s=1) as server:
        report = await run_check(groups_file, server.url)

    assert report["envfarm"].startswith(str(ROOT))
    labels, logprobs, advantages = expected_terms(offline)
    terms = report["offline"]
    # every sampled token once per row, with the logprob the server gave and the group's advantage
    assert sorted(terms["labels"]) == sorted(labels)
    assert terms["trained_tokens"] == len(labels)
    assert sorted(round(p, 4) for p in terms["old_log_probs"]) == sorted(
        round(p, 4) for p in logprobs
    )
    assert sorted(round(a, 4) for a in terms["advantages"]) == sorted(
        round(a, 4) for a in advantages
    )
    samples = terms["samples"]
    assert terms["batch_samples"] == len(samples)
    assert {s["group_id"] for s in samples} == {1, 2}
    assert {(s["group_id"], s["model_version"]) for s in samples} == {(1, 3), (2, 4)}
    # the summarized session gives one row per segment; the invalid one keeps its rows, unweighted
    assert sum(1 for s in samples if s["group_id"] == 1) == 5
    invalid = [s for s in samples if s["reward"] is None or math.isnan(s["reward"])]
    assert len(invalid) == 2  # the invalid episode's row, in each group
    assert all(s["advantage"] == 0.0 for s in invalid)

    live = report["live"]
    assert live["missing_members"] == []
    assert {"rollout_buffer", "start", "stop", "update_model_version", "check_health"} <= set(
        live["protocol_members"]
    )
    assert (live["delivered"], live["dropped_stale"]) == (2, 1)
    assert live["group_ids"] == [1, 2]  # numbered as queued: the stale cursor 2 never was
    live_labels, _, _ = expected_terms([fresh, late])
    assert sorted(live["labels"]) == sorted(live_labels)
    assert service.versions == ["5", "6"]
    assert service.acked[(job_id, "trl")] >= 2


def test_trl_offers_the_environment_class_the_step_apis_tools() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    script = ROOT / "tests" / "trainers" / "trl_environment_check.py"
    out = subprocess.run([trl_python(), script], check=True, capture_output=True, env=env)
    report = json.loads(out.stdout.decode().strip().splitlines()[-1])
    schemas = report["schemas"]
    assert report["has_reset"]
    assert report["has_get_reward"]
    assert set(schemas) == {s["function"]["name"] for s in tool_schemas()}
    for expected in tool_schemas():
        function = expected["function"]
        rendered = schemas[function["name"]]["function"]
        parameters = function["parameters"]
        assert set(rendered["parameters"]["properties"]) <= set(parameters["properties"])
        assert sorted(rendered["parameters"].get("required", [])) == sorted(
            parameters.get("required", [])
        )
