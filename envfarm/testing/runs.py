"""Synthetic runs: ``trajectories.jsonl`` files of valid ``envfarm.trajectory/1`` lines, with
every feature the viewer shows (groups, flags with evidence, invalid rewards, zero-variance
groups, tool output long enough to fold, token data, policy versions, summaries), built from the
models so they stay in step with the schema. For the viewer's tests and its benchmark.
"""

from __future__ import annotations

import random
import statistics
from pathlib import Path

from envfarm.models.trajectory import (
    AgentOutcome,
    ErrorInfo,
    PolicyVersions,
    Provenance,
    ReportedTest,
    Reward,
    Segment,
    Timings,
    ToolResult,
    Trajectory,
    Turn,
    Usage,
)


def synthetic_trajectory(
    rng: random.Random,
    *,
    job_id: str,
    group_id: str,
    task_id: str,
    number: int,
    reward: float | None,
    flagged: bool = False,
    turns: int = 4,
    tokens: bool = False,
    version: int = 1,
    summarized: bool = False,
) -> Trajectory:
    episode_id = f"ep-{job_id[-4:]}-{number:06d}"
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are a coding agent. Use bash; call submit when done."},
        {"role": "user", "content": f"Solve {task_id}.\n\nThe tests live in /tests."},
    ]
    turn_list: list[Turn] = []
    for index in range(turns):
        call_id = f"call_{index}_0"
        last = index == turns - 1
        name = "submit" if last else "bash"
        arguments = "{}" if last else f'{{"command": "cat file_{index}.txt"}}'
        lines = 3 if index % 2 else 60
        output = "" if last else "\n".join(f"line {i} of file_{index}" for i in range(lines))
        messages.append(
            {
                "role": "assistant",
                "content": f"Step {index}: looking at file_{index}." if not last else "Done.",
                "tool_calls": [
                    {"id": call_id, "type": "function",
                     "function": {"name": name, "arguments": arguments}}
                ],
            }
        )  # fmt: skip
        messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
        count = rng.randint(8, 24)
        turn_list.append(
            Turn(
                index=index,
                policy_version=str(version),
                policy_version_source="published",
                token_source="vllm" if tokens else "none",
                prompt_token_ids=[rng.randint(0, 50000) for _ in range(16)] if tokens else None,
                completion_token_ids=[rng.randint(0, 50000) for _ in range(count)]
                if tokens
                else None,
                logprobs=[-rng.expovariate(2.0) for _ in range(count)] if tokens else None,
                finish_reason="tool_calls",
                latency_s=round(rng.uniform(0.05, 1.5), 3),
                usage=Usage(prompt_tokens=100 + index * 40, completion_tokens=count),
                endpoint="http://127.0.0.1:8000/v1",
                tool_results=[
                    ToolResult(
                        call_id=call_id,
                        name=name,
                        arguments=arguments,
                        output=output,
                        exit_code=None if last else 0,
                        duration_s=round(rng.uniform(0.001, 0.3), 3),
                    )
                ],
            )
        )
    segments: list[Segment] = []
    if summarized and turns > 2:
        prior = messages[: 2 + 2 * (turns - 2)]
        for turn in turn_list[turns - 2 :]:
            turn.segment = 1
        turn_list[turns - 3].kind = "summary"
        segments.append(
            Segment(index=1, summary="I read the files; next I submit.", first_turn=turns - 2,
                    summary_turn=turns - 3, context_budget=4096, context_tokens=4200,
                    prior_messages=prior)
        )  # fmt: skip
        opening: dict[str, object] = {
            "role": "user",
            "content": "Solve it.\n\nSummary: I read the files.",
        }
        messages = [messages[0], opening, *_tail(turn_list, turns - 2)]
    error = None
    if reward is None:
        error = ErrorInfo(type="SandboxDied", message="the sandbox exited with 137",
                          phase="agent", infrastructure=True, retryable=True)  # fmt: skip
    flags = ["tamper:tests_modified"] if flagged else []
    return Trajectory(
        trajectory_id=f"{episode_id}-a0",
        episode_id=episode_id,
        job_id=job_id,
        group_id=group_id,
        task_id=task_id,
        messages=messages,
        turns=turn_list,
        segments=segments,
        reward=Reward(
            value=reward,
            valid=reward is not None,
            components={} if reward is None else {"reward": reward, "tests_passed": 3 * reward},
            flags=flags,
            flag_details={"tamper:tests_modified": ["/tests/test_outputs.py"]} if flagged else {},
            reason="reward.txt" if reward is not None else "SandboxDied: the sandbox exited",
            tests=[
                ReportedTest(
                    name="test_outputs.py::test_main",
                    status="passed" if reward else "failed",
                    duration_s=0.01,
                    report="junit.xml",
                )
            ],
        ),
        timings=Timings(
            build_s=0.0,
            provision_s=round(rng.uniform(0.2, 0.6), 3),
            agent_s=round(rng.uniform(0.5, 5), 3),
            grading_s=round(rng.uniform(0.3, 2), 3),
            teardown_s=0.2,
            total_s=6.0,
        ),
        policy_versions=PolicyVersions(min=str(version), max=str(version)),
        model="synthetic",
        outcome=AgentOutcome(stop_reason="submitted", turns=turns),
        error=error,
        provenance=Provenance(task_hash="0" * 16, envfarm_version="0.1.0", seed=number),
    )


def _tail(turns: list[Turn], first: int) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for turn in turns[first:]:
        result = turn.tool_results[0]
        out.append(
            {"role": "assistant", "content": f"Step {turn.index}.",
             "tool_calls": [{"id": result.call_id, "type": "function",
                             "function": {"name": result.name, "arguments": result.arguments}}]}
        )  # fmt: skip
        out.append({"role": "tool", "tool_call_id": result.call_id, "content": result.output})
    return out


def write_synthetic_run(
    out: Path,
    episodes: int,
    *,
    group_size: int = 4,
    tasks: int = 10,
    seed: int = 0,
    tokens: bool = False,
    job_id: str = "job-synthetic",
) -> list[Trajectory]:
    """Write ``out/trajectories.jsonl`` with ``episodes`` lines in groups of ``group_size``;
    about one group in five has equal rewards, one episode in 25 is flagged, one in 50 is an
    infrastructure error. Returns the trajectories written."""
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Trajectory] = []
    with (out / "trajectories.jsonl").open("w", encoding="utf-8") as lines:
        number = 0
        group = 0
        while number < episodes:
            task_id = f"task-{group % tasks:03d}"
            group_id = f"grp-{group:06d}"
            same = rng.random() < 0.2
            members = []
            for _ in range(min(group_size, episodes - number)):
                value: float | None = 1.0 if same else float(rng.random() < 0.5)
                if not same and rng.random() < 0.02:
                    value = None
                members.append(
                    synthetic_trajectory(
                        rng, job_id=job_id, group_id=group_id, task_id=task_id, number=number,
                        reward=value, flagged=rng.random() < 0.04, tokens=tokens,
                        version=1 + group // 25, summarized=number % 10 == 3,
                        turns=rng.randint(3, 8),
                    )
                )  # fmt: skip
                number += 1
            _advantages(members)
            for member in members:
                lines.write(member.to_json() + "\n")
            written.extend(members)
            group += 1
    return written


def _advantages(members: list[Trajectory]) -> None:
    values = [m.reward.value for m in members if m.reward.valid and m.reward.value is not None]
    if len(values) < 2:
        return
    mean, std = statistics.fmean(values), statistics.pstdev(values)
    for member in members:
        member.group_zero_variance = std == 0
        if member.reward.valid and member.reward.value is not None:
            member.advantage = (member.reward.value - mean) / (std + 1e-6)
