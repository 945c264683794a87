"""The audit's battery as data: the shipped file, a user's file merged by id, errors that name
the file and the field, each rule's verdict, and the command's exit codes on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from envfarm.audit.battery import SHIPPED, Battery, load_battery, parse_battery, shipped_battery
from envfarm.audit.host import probe_host
from envfarm.audit.report import AuditReport, TaskAudit, judge
from envfarm.cli.main import cli
from envfarm.errors import BatteryError

CATEGORIES = {
    "processes", "hostnames", "container", "user", "environment", "kernel", "devices", "tools",
    "network", "grading", "names", "timestamps", "resources",
}  # fmt: skip
PROBE = """
[[probe]]
id = "{id}"
category = "test"
command = "echo hello"
reference = "a workstation says hello"
rule = {rule}
"""


def probe_text(rule: str, probe_id: str = "hello") -> str:
    return PROBE.format(id=probe_id, rule=rule)


def one(rule: str) -> Battery:
    return parse_battery(probe_text(rule), "mine.toml")


def test_the_shipped_battery_covers_every_category_with_unique_ids() -> None:
    battery = shipped_battery()
    ids = [p.id for p in battery.probes]
    assert len(ids) == len(set(ids)) >= 30
    assert {p.category for p in battery.probes} == CATEGORIES
    assert all(p.reference and p.command for p in battery.probes)


def test_a_user_file_replaces_adds_and_drops_probes_by_id(tmp_path: Path) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text(
        probe_text('{ kind = "match", pattern = "hello" }', "pid1")
        + probe_text('{ kind = "absent", pattern = "bye" }', "new-one")
        + '[[probe]]\nid = "uptime"\ncategory = "x"\ncommand = "true"\nreference = "r"\n'
        'rule = { kind = "match", pattern = "x" }\nenabled = false\n'
    )
    shipped = {p.id for p in shipped_battery().probes}
    battery = load_battery([mine])
    ids = [p.id for p in battery.probes]
    assert set(ids) == (shipped - {"uptime"}) | {"new-one"}
    pid1 = next(p for p in battery.probes if p.id == "pid1")
    assert pid1.command == "echo hello"
    assert pid1.category == "test"


@pytest.mark.parametrize(
    ("text", "field", "why"),
    [
        (probe_text('{ kind = "compare", pattern = "(?P<a>1)", op = "less" }'),
         "probe[0] (id 'hello').rule.op", "'lt'"),
        (probe_text('{ kind = "match", pattern = "([" }'),
         "probe[0] (id 'hello').rule.pattern", "not a valid regular expression"),
        (probe_text('{ kind = "compare", pattern = "x", op = "lt", than = 1 }'),
         "probe[0] (id 'hello').rule", "named group `a`"),
        (probe_text('{ kind = "compare", pattern = "(?P<a>1)", op = "lt" }'),
         "probe[0] (id 'hello').rule", "`b` or as `than`"),
        (probe_text('{ kind = "regex", pattern = "x" }'), "probe[0] (id 'hello').rule", "kind"),
        (probe_text('{ kind = "match", pattern = "x" }').replace("command", "comand"),
         "probe[0] (id 'hello').command", "Field required"),
        (probe_text('{ kind = "match", pattern = "x" }') * 2, "probe[1].id", "used twice"),
        ("[[probe]\n", None, "not valid TOML"),
    ],
)  # fmt: skip
def test_a_bad_battery_names_the_file_and_the_field(text: str, field: str | None, why: str) -> None:
    with pytest.raises(BatteryError) as raised:
        parse_battery(text, "mine.toml")
    assert raised.value.path == "mine.toml"
    assert raised.value.field == field
    assert why in str(raised.value)
    assert str(raised.value).startswith(f"mine.toml: {field}" if field else "mine.toml: ")


def test_an_unreadable_battery_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(BatteryError, match=r"nowhere\.toml: cannot be read"):
        load_battery([tmp_path / "nowhere.toml"])


def test_match_reports_the_whole_lines_that_matched() -> None:
    [probe] = one('{ kind = "match", pattern = "sandbox|--pids" }').probes
    result = judge(probe, "first\n/.x/sandboxd --pids-limit 1\nlast\n[exit code: 0]", 0, None)
    assert (result.verdict, result.evidence) == ("tell", "/.x/sandboxd --pids-limit 1")
    assert judge(probe, "nothing here\n[exit code: 0]", 0, None).verdict == "clean"


def test_absent_is_a_tell_when_the_pattern_is_missing() -> None:
    [probe] = one("""{ kind = "absent", pattern = '^(?!lo$)\\S+$' }""").probes
    only_lo = judge(probe, "lo\n[exit code: 0]", 0, None)
    assert (only_lo.verdict, only_lo.evidence) == ("tell", "lo")
    assert judge(probe, "eth0\nlo\n[exit code: 0]", 0, None).verdict == "clean"
    assert judge(probe, "[exit code: 0]", 0, None).evidence == "(no output)"


def test_compare_takes_two_groups_or_a_constant() -> None:
    two_groups = """'(?s)n=(?P<a>\\d+).*m=(?P<b>\\d+)'"""
    [two] = one(f'{{ kind = "compare", pattern = {two_groups}, op = "gt" }}').probes
    assert judge(two, "n=4\nm=2", 0, None).verdict == "tell"
    assert judge(two, "n=2\nm=2", 0, None).verdict == "clean"
    assert judge(two, "n=4", 0, None).verdict == "clean"  # no limit: nothing to compare
    up = """'up=(?P<a>\\d+)'"""
    [const] = one(f'{{ kind = "compare", pattern = {up}, op = "lt", than = 600 }}').probes
    assert judge(const, "up=12", 0, None).verdict == "tell"
    assert judge(const, "up=86400", 0, None).verdict == "clean"


def test_a_probe_that_fails_is_an_error_never_a_tell() -> None:
    [probe] = one('{ kind = "absent", pattern = "hello" }').probes
    failed = judge(probe, "boom\n[exit code: 2]", 2, None)
    assert failed.verdict == "error"
    assert "exit code 2" in failed.evidence
    timed_out = judge(probe, "", None, "timed out after 10s")
    assert (timed_out.verdict, timed_out.evidence) == ("error", "timed out after 10s")


def test_exit_codes_of_a_report() -> None:
    [probe] = one('{ kind = "match", pattern = "hello" }').probes
    tell = judge(probe, "hello", 0, None)
    assert AuditReport(tasks=[TaskAudit(task="t")]).counted().exit_code == 0
    assert AuditReport(tasks=[TaskAudit(task="t", probes=[tell])]).counted().exit_code == 1
    assert AuditReport(bad_inputs={"x": "bad"}).exit_code == 2
    assert AuditReport(tasks=[TaskAudit(task="t", error="no start")]).exit_code == 3
    assert AuditReport(tasks=[TaskAudit(task="t", error="bad", bad_input=True)]).exit_code == 2


async def test_the_host_comparison_runs_the_battery_here() -> None:
    battery = parse_battery(
        probe_text('{ kind = "match", pattern = "hello" }')
        + probe_text('{ kind = "match", pattern = "x" }', "slow")
        .replace("echo hello", "sleep 5")
        .replace('category = "test"', 'category = "test"\ntimeout_s = 0.2'),
        "mine.toml",
    )
    hello, slow = await probe_host(battery)
    assert (hello.verdict, hello.evidence) == ("tell", "hello")
    assert slow.verdict == "error"
    assert "timed out" in slow.evidence


def test_cli_bad_battery_exits_2_naming_file_and_field(tmp_path: Path) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text(probe_text('{ kind = "match", pattern = "([" }'))
    task = tmp_path / "task"
    result = CliRunner().invoke(cli, ["audit", str(task), "--battery", str(mine)])
    assert result.exit_code == 2
    assert f"{mine}: probe[0] (id 'hello').rule.pattern" in result.output


def test_cli_without_a_runnable_task_exits_2(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "task.toml").write_text("[task\n")
    result = CliRunner().invoke(cli, ["audit", str(tmp_path / "broken"), "--json"])
    assert result.exit_code == 2, result.output
    report = json.loads(result.stdout)
    assert report["schema"] == "envfarm.audit/1"
    assert report["tells"] == 0
    assert list(report["bad_inputs"]) == [str(tmp_path / "broken" / "task.toml")]


def test_the_shipped_battery_is_named_in_its_errors() -> None:
    assert SHIPPED == "envfarm/audit/battery.toml"
    assert Path(__file__).parents[2].joinpath(SHIPPED).is_file()
