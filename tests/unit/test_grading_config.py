"""The task.toml fields of grading: artifacts, collect hooks, flag policy, test lists, reports."""

from __future__ import annotations

import tomllib

import pytest

from envfarm.errors import TaskSpecError
from envfarm.spec.config import TaskConfig
from envfarm.spec.task_toml import parse_task_config


def parse(text: str) -> TaskConfig:
    return parse_task_config(tomllib.loads(text), "task.toml")


def error(text: str) -> TaskSpecError:
    with pytest.raises(TaskSpecError) as caught:
        parse(text)
    return caught.value


def test_defaults() -> None:
    config = parse("")
    assert config.artifacts == []
    assert config.verifier.collect == []
    assert config.verifier.zero_on_flags == ["report:*"]
    assert (config.verifier.fail_to_pass, config.verifier.pass_to_pass) == ([], [])
    assert config.verifier.reports == []


def test_harbor_artifacts_and_collect_hooks_are_read() -> None:
    config = parse(
        'artifacts = ["/app/out", {source = "/data", destination = "d", exclude = ["*.tmp"]}]\n'
        "[[verifier.collect]]\n"
        'command = "pg_dump -h db app > /logs/artifacts/db.sql"\n'
        "timeout_sec = 30\n"
        'user = "postgres"\n'
    )
    assert [(a.source, a.destination, a.exclude) for a in config.artifacts] == [
        ("/app/out", None, []),
        ("/data", "d", ["*.tmp"]),
    ]
    [hook] = config.verifier.collect
    assert (hook.timeout_sec, hook.user) == (30, "postgres")


def test_flag_policy_accepts_patterns_and_booleans() -> None:
    assert parse("[verifier]\nzero_on_flags = true\n").verifier.zero_on_flags == ["*"]
    assert parse("[verifier]\nzero_on_flags = false\n").verifier.zero_on_flags == []
    patterns = '[verifier]\nzero_on_flags = ["tamper:conftest_*", "git:history_mining"]\n'
    assert parse(patterns).verifier.zero_on_flags == ["tamper:conftest_*", "git:history_mining"]


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ('[verifier]\nzero_on_flags = ["conftest"]\n', "verifier.zero_on_flags", "category:name"),
        ('[verifier]\nfail_to_pass = ["a", "a"]\n', "verifier.fail_to_pass", "repeated"),
        ('[verifier]\npass_to_pass = [""]\n', "verifier.pass_to_pass", "must not be empty"),
        (
            '[verifier]\nfail_to_pass = ["t::a"]\npass_to_pass = ["t::a"]\n',
            "verifier",
            "in both fail_to_pass and pass_to_pass",
        ),
        ('[verifier]\nreports = ["../etc/passwd"]\n', "verifier.reports", "under /logs/verifier"),
        ('artifacts = ["out"]\n', "artifacts[0].source", "absolute path"),
        ("[[verifier.collect]]\ntimeout_sec = 5\n", "verifier.collect[0].command", "required"),
    ],
)
def test_bad_grading_fields_name_the_field(text: str, field: str, message: str) -> None:
    problem = error(text)
    assert problem.field == field
    assert message in problem.detail


def test_reports_may_be_given_with_their_directory() -> None:
    config = parse('[verifier]\nreports = ["/logs/verifier/out/junit.xml", "ctrf.json"]\n')
    assert config.verifier.reports == ["out/junit.xml", "ctrf.json"]
