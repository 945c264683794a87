import json
from importlib import resources

import pytest

from envfarm.models.trajectory import (
    SCHEMA_VERSION,
    Provenance,
    Trajectory,
    trajectory_json_schema,
)

CONTRACT_FIELDS = {
    "schema",
    "trajectory_id",
    "episode_id",
    "job_id",
    "group_id",
    "task_id",
    "attempt",
    "messages",
    "turns",
    "segments",
    "reward",
    "timings",
    "policy_versions",
    "advantage",
}
TURN_FIELDS = {
    "segment",
    "policy_version",
    "prompt_token_ids",
    "completion_token_ids",
    "logprobs",
    "routed_experts",
    "finish_reason",
    "sampling",
    "latency_s",
    "usage",
    "endpoint",
    "tool_results",
}


def _blank() -> Trajectory:
    return Trajectory(
        trajectory_id="t",
        episode_id="e",
        job_id="j",
        group_id="g",
        task_id="x",
        provenance=Provenance(task_hash="h", envfarm_version="0"),
    )


def test_shipped_schema_file_matches_the_model() -> None:
    shipped = resources.files("envfarm").joinpath("schemas/trajectory.schema.json").read_text()
    generated = json.dumps(trajectory_json_schema(), indent=2, sort_keys=True) + "\n"
    assert shipped == generated, (
        "regenerate with: envfarm schema --out envfarm/schemas/trajectory.schema.json"
    )


def test_contract_field_names_are_all_in_the_schema() -> None:
    schema = trajectory_json_schema()
    assert CONTRACT_FIELDS <= set(schema["properties"])
    turn = schema["$defs"]["Turn"]["properties"]
    assert TURN_FIELDS <= set(turn)
    assert set(schema["$defs"]["ToolResult"]["properties"]) >= {
        "call_id",
        "name",
        "arguments",
        "output",
        "truncated",
        "exit_code",
        "duration_s",
    }
    assert set(schema["$defs"]["Reward"]["properties"]) >= {
        "value",
        "valid",
        "components",
        "flags",
        "reason",
    }
    assert set(schema["$defs"]["Timings"]["properties"]) >= {
        "build_s",
        "provision_s",
        "agent_s",
        "grading_s",
        "teardown_s",
        "total_s",
    }


def test_every_field_is_present_in_json_even_when_unset() -> None:
    data = json.loads(_blank().to_json())
    assert data["schema"] == SCHEMA_VERSION
    assert CONTRACT_FIELDS <= set(data)
    assert data["reward"] == {
        "value": None,
        "valid": False,
        "components": {},
        "flags": [],
        "reason": None,
        "flag_details": {},
        "tests": [],
    }
    assert data["artifacts"] is None
    assert data["advantage"] is None
    assert data["provenance"]["envfarm_version"] == "0"


def test_json_round_trips_through_the_model() -> None:
    text = _blank().to_json()
    again = Trajectory.model_validate_json(text)
    assert again.to_json() == text


def test_unknown_fields_are_rejected() -> None:
    data = json.loads(_blank().to_json())
    data["rewrd"] = 1
    with pytest.raises(ValueError, match="rewrd"):
        Trajectory.model_validate(data)
